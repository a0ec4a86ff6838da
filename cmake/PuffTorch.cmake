# Torch operator library: PUFF_TORCH=AUTO|ON|OFF. Sets PUFF_HAS_TORCH (0/1).
#
# libpuffadv_torch is a separate shared library (the nanobind module stays
# torch-free) that `import puffadv.torch` loads with torch.ops.load_library.
# It needs the torch the build's Python imports: under `pip install .` (build
# isolation) there is none, so users build it with `pip install --no-build-isolation .`.
#
# It uses only torch's LibTorch Stable ABI (torch/csrc/stable: C shims in
# libtorch_cpu plus header-only C++), compiled for TORCH_TARGET_VERSION =
# PUFF_TORCH_FLOOR, so one binary loads into every torch release from the floor
# on, CPU-only and CUDA builds alike (the CUDA stream shim is looked up at run
# time, src/torch/stream.cpp). The headers of any torch >= the floor build it.
# That is also why it does not call find_package(Torch): with a CUDA torch,
# Caffe2's config demands a matching CUDA toolkit, nvrtc and TORCH_CUDA_ARCH_LIST
# that this library never uses.
set(PUFF_HAS_TORCH 0)
# The oldest torch this library loads into: 2.10, the first release whose Stable
# ABI has everything the operators use (versioned torch_library_impl, typed data
# pointers, empty/new_empty/to with options, std::string returns).
set(PUFF_TORCH_FLOOR "2.10")
set(PUFF_TORCH_TARGET_VERSION "0x020a000000000000")  # [major][minor][patch][abi tag 5 bytes]

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
        "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
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
      # The Stable ABI headers of the floor release (torch/csrc/stable/version.h) are needed.
      string(REGEX MATCH "^[0-9]+\\.[0-9]+" _release "${_version}")
      if(_release VERSION_LESS PUFF_TORCH_FLOOR)
        set(_why "torch ${_version} predates the LibTorch Stable ABI the operators are built on; "
                 "use torch >= ${PUFF_TORCH_FLOOR} to build them")
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
  find_library(PUFF_TORCH_CPU torch_cpu PATHS "${_root}/lib" NO_DEFAULT_PATH REQUIRED)
  set(PUFF_TORCH_ROOT "${_root}" PARENT_SCOPE)
  set(PUFF_TORCH_VERSION "${_version}" PARENT_SCOPE)
  set(PUFF_HAS_TORCH 1 PARENT_SCOPE)
endfunction()
_puff_find_torch()

if(PUFF_HAS_TORCH)
  message(STATUS "puffadv: torch operator library on the LibTorch Stable ABI, for torch >= "
                 "${PUFF_TORCH_FLOOR} (headers of torch ${PUFF_TORCH_VERSION}, ${PUFF_TORCH_ROOT})")
  # MODULE: only ever dlopen'ed (torch.ops.load_library), never linked against.
  add_library(puffadv_torch MODULE
    src/torch/ops.cpp      # the op table's one kernel on the CPU and CUDA keys; host fallback
    src/torch/tensors.cpp  # tensor -> matrix, the core's errors -> torch's, the core's one call
    src/torch/stream.cpp   # torch's current stream (CUDA, HIP under ROCm torch), found at run time
  )
  target_include_directories(puffadv_torch SYSTEM PRIVATE "${PUFF_TORCH_ROOT}/include")
  target_include_directories(puffadv_torch PRIVATE "${PROJECT_SOURCE_DIR}/src")  # private headers by their path under src/
  # libtorch_cpu holds every Stable ABI shim; linking it names the missing one
  # when a torch older than the floor loads the library.
  # dlopen/dlsym find the CUDA stream shim of a CUDA torch at run time (stream.cpp).
  target_link_libraries(puffadv_torch PRIVATE puffadv "${PUFF_TORCH_CPU}" ${CMAKE_DL_LIBS})
  # torch's own extensions build as C++20 from torch 2.14 on; older headers accept it too.
  target_compile_features(puffadv_torch PRIVATE cxx_std_20)
  target_compile_definitions(puffadv_torch PRIVATE
    TORCH_TARGET_VERSION=${PUFF_TORCH_TARGET_VERSION}  # only the Stable ABI of the floor release
    PUFF_TORCH_BUILT_WITH="${PUFF_TORCH_VERSION}")
  # Not puff_configure_cxx_target: LTO over torch's headers costs link time for
  # glue code; the sanitizers still cover it.
  if(NOT MSVC)
    target_compile_options(puffadv_torch PRIVATE -Wall -Wextra)
  endif()
  if(PUFF_SANITIZE)
    target_compile_options(puffadv_torch PRIVATE ${PUFF_SANITIZER_FLAGS})
    target_link_options(puffadv_torch PRIVATE ${PUFF_SANITIZER_FLAGS})
  endif()
  # Installed beside the core library (puffadv/lib in the wheel). libtorch_cpu
  # is not on the RPATH: `import torch` has loaded it already.
  set_target_properties(puffadv_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
  include(GNUInstallDirs)
  if(SKBUILD)
    install(TARGETS puffadv_torch LIBRARY DESTINATION puffadv/lib COMPONENT python)
    # Read by puffadv/_torch_status.py before loading, so a torch older than the
    # floor is reported by name instead of as an undefined-symbol traceback.
    set(PUFF_TORCH_LIBRARY_NAME "${CMAKE_SHARED_MODULE_PREFIX}puffadv_torch${CMAKE_SHARED_MODULE_SUFFIX}")
    configure_file("${PROJECT_SOURCE_DIR}/cmake/torch_build.py.in"
                   "${PROJECT_BINARY_DIR}/_torch_build.py" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/_torch_build.py" DESTINATION puffadv COMPONENT python)
  else()
    install(TARGETS puffadv_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endif()
