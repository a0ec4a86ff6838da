# Torch operator library: PUFF_TORCH=AUTO|ON|OFF. Sets PUFF_HAS_TORCH (0/1).
#
# libpuffadv_torch is a separate shared library (the nanobind module stays
# torch-free) that `import puffadv.torch` loads with torch.ops.load_library.
# It needs the torch the build's Python imports: under `pip install .` (build
# isolation) there is none, so users build it with `pip install --no-build-isolation .`.
#
# It uses only libc10 + libtorch_cpu and c10's device-agnostic stream/guard
# interface, never ATen/cuda headers or c10_cuda, so one binary serves a
# CPU-only torch and a CUDA torch. That is also why it does not call
# find_package(Torch): with a CUDA torch, Caffe2's config demands a matching
# CUDA toolkit, nvrtc and TORCH_CUDA_ARCH_LIST that this library never uses.
set(PUFF_HAS_TORCH 0)

function(_puff_find_torch)
  if(PUFF_TORCH STREQUAL "OFF")
    return()
  endif()
  if(NOT Python_EXECUTABLE)
    find_package(Python 3.9 COMPONENTS Interpreter)
  endif()
  set(_why "")
  if(NOT Python_EXECUTABLE)
    set(_why "no Python interpreter found")
  else()
    # torch.utils.cmake_prefix_path is <torch>/share/cmake; headers and libs sit beside it.
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
        "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(int(torch.compiled_with_cxx11_abi())); print(torch.version.hip or ''); print(torch.version.cuda or '')"
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0)
      string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" _err "${_err}")
      set(_why "torch is not importable by ${Python_EXECUTABLE} (${_err}). "
               "`pip install .` builds in an isolated environment without torch: "
               "build with `pip install --no-build-isolation .` in the environment that has torch")
    else()
      string(REPLACE "\n" ";" _out "${_out}")
      list(GET _out 0 _prefix)
      list(GET _out 1 _version)
      list(GET _out 2 _abi)
      list(LENGTH _out _n)
      set(_hip "")
      set(_cuda "")
      if(_n GREATER 3)
        list(GET _out 3 _hip)
      endif()
      if(_n GREATER 4)
        list(GET _out 4 _cuda)
      endif()
      # The core's API passes std::string; torch < 2.7 wheels use the pre-C++11 string ABI.
      if(NOT _abi EQUAL 1)
        set(_why "torch ${_version} uses the pre-C++11 std::string ABI, which the core library "
                 "does not; use torch >= 2.7")
      endif()
    endif()
  endif()
  if(NOT _why STREQUAL "")
    string(JOIN "" _why ${_why})
    if(PUFF_TORCH STREQUAL "ON")
      message(FATAL_ERROR "PUFF_TORCH=ON: ${_why}")
    endif()
    message(STATUS "puffadv: torch operator library not built: ${_why}")
    return()
  endif()

  get_filename_component(_root "${_prefix}/../.." ABSOLUTE)
  find_library(PUFF_TORCH_C10 c10 PATHS "${_root}/lib" NO_DEFAULT_PATH REQUIRED)
  find_library(PUFF_TORCH_CPU torch_cpu PATHS "${_root}/lib" NO_DEFAULT_PATH REQUIRED)
  set(PUFF_TORCH_ROOT "${_root}" PARENT_SCOPE)
  set(PUFF_TORCH_VERSION "${_version}" PARENT_SCOPE)
  set(PUFF_TORCH_HIP_VERSION "${_hip}" PARENT_SCOPE)
  set(PUFF_TORCH_CUDA_VERSION "${_cuda}" PARENT_SCOPE)
  set(PUFF_HAS_TORCH 1 PARENT_SCOPE)
endfunction()
_puff_find_torch()

if(PUFF_HAS_TORCH)
  message(STATUS "puffadv: torch operator library against torch ${PUFF_TORCH_VERSION} (${PUFF_TORCH_ROOT})")
  # MODULE: only ever dlopen'ed (torch.ops.load_library), never linked against.
  add_library(puffadv_torch MODULE
    src/torch/ops.cpp        # schema, tensor -> matrix, CPU kernels, build facts
    src/torch/ops_cuda.cpp   # CUDA dispatch key (also HIP under ROCm torch); CPU fallback
    src/torch/conventions_ops.cpp  # gae / td_lambda_returns / vtrace (issue 6)
  )
  target_include_directories(puffadv_torch SYSTEM PRIVATE "${PUFF_TORCH_ROOT}/include")
  target_link_libraries(puffadv_torch PRIVATE puffadv "${PUFF_TORCH_C10}" "${PUFF_TORCH_CPU}")
  # torch's own extensions build as C++20 from torch 2.14 on; older headers accept it too.
  target_compile_features(puffadv_torch PRIVATE cxx_std_20)
  # ROCm torch puts HIP tensors under the CUDA key; the core calls that memory rocm.
  if(PUFF_TORCH_HIP_VERSION)
    set(_puff_torch_rocm 1)
  else()
    set(_puff_torch_rocm 0)
  endif()
  target_compile_definitions(puffadv_torch PRIVATE
    PUFF_TORCH_BUILT_WITH="${PUFF_TORCH_VERSION}"
    PUFF_TORCH_ROCM=${_puff_torch_rocm})
  # Not puff_configure_cxx_target: LTO over torch's headers costs link time for
  # glue code; the sanitizers still cover it.
  if(NOT MSVC)
    target_compile_options(puffadv_torch PRIVATE -Wall -Wextra)
  endif()
  if(PUFF_SANITIZE)
    target_compile_options(puffadv_torch PRIVATE ${PUFF_SANITIZER_FLAGS})
    target_link_options(puffadv_torch PRIVATE ${PUFF_SANITIZER_FLAGS})
  endif()
  # Installed beside the core library (puffadv/lib in the wheel). libc10 and
  # libtorch_cpu are not on the RPATH: `import torch` has loaded them already.
  set_target_properties(puffadv_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
  include(GNUInstallDirs)
  if(SKBUILD)
    install(TARGETS puffadv_torch LIBRARY DESTINATION puffadv/lib COMPONENT python)
    # Read by puffadv/_torch_status.py before loading, so a torch mismatch is
    # reported by name instead of as an undefined-symbol traceback.
    set(PUFF_TORCH_LIBRARY_NAME "${CMAKE_SHARED_MODULE_PREFIX}puffadv_torch${CMAKE_SHARED_MODULE_SUFFIX}")
    configure_file("${PROJECT_SOURCE_DIR}/cmake/torch_build.py.in"
                   "${PROJECT_BINARY_DIR}/_torch_build.py" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/_torch_build.py" DESTINATION puffadv COMPONENT python)
  else()
    install(TARGETS puffadv_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endif()
