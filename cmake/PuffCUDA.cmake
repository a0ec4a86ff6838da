# CUDA backend: PUFF_CUDA=AUTO|ON|OFF. Sets PUFFADV_HAS_CUDA (0/1), defines
# puff_add_cuda_sources(target) and appends to PUFF_GPU_ARCHITECTURES.
#
# Architectures:
#   75 Turing (T4, RTX 20xx)      80 Ampere (A100, A30)      86 Ampere (RTX 30xx, A10, A40)
#   89 Ada (L4, L40, RTX 40xx)    90 Hopper (H100, H200)     100/120 Blackwell (B200, RTX 50xx)
# Which ones a build compiles (the first rule that applies):
#   1. CMAKE_CUDA_ARCHITECTURES or the CUDAARCHS environment variable: exactly those.
#   2. PUFF_CUDA=ON (release wheels, explicit builds): PUFF_CUDA_RELEASE_ARCHITECTURES,
#      machine code for each and PTX for 90, which the driver compiles for newer GPUs
#      (Blackwell) at first use. CUDA 13 dropped sm_50-72. About 4.5 minutes on 2 cores.
#   3. PUFF_CUDA=AUTO: the GPUs of this machine (nvidia-smi). No NVIDIA GPU: no CUDA
#      backend, even with nvcc on PATH: a plain `pip install .` stays a ~1 minute CPU
#      build, and says so in its log (pip install -v).
set(PUFF_CUDA_RELEASE_ARCHITECTURES "75-real;80-real;86-real;89-real;90")
set(PUFFADV_HAS_CUDA 0)
if(NOT DEFINED PUFF_GPU_ARCHITECTURES)
  set(PUFF_GPU_ARCHITECTURES "")
endif()
if(PUFF_CUDA STREQUAL "OFF")
  return()
endif()

# The compute capabilities of this machine's NVIDIA GPUs as "<cc>-real" entries
# ("" when there is no GPU or no driver). nvidia-smi ships with every driver.
function(_puff_local_cuda_architectures out_var)
  set(archs "")
  find_program(PUFF_NVIDIA_SMI nvidia-smi)
  if(PUFF_NVIDIA_SMI)
    execute_process(COMMAND "${PUFF_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_QUIET TIMEOUT 30)
    if(rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${out}")
      foreach(cap IN LISTS caps)
        string(REPLACE "." "" cap "${cap}")
        list(APPEND archs "${cap}-real")
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  set(${out_var} "${archs}" PARENT_SCOPE)
endfunction()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(PUFF_CUDA STREQUAL "ON")
    message(FATAL_ERROR
      "PUFF_CUDA=ON but no CUDA compiler was found: install the CUDA toolkit (nvcc, 12.0 "
      "or newer) and put it on PATH, or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc "
      "(pip: -C cmake.define.CMAKE_CUDA_COMPILER=...); or build with PUFF_CUDA=OFF.")
  endif()
  message(STATUS "puffadv: CUDA backend off (no CUDA compiler found; PUFF_CUDA=AUTO)")
  return()
endif()

if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
  set(_puff_cuda_arch_reason "as requested (CMAKE_CUDA_ARCHITECTURES / CUDAARCHS)")
elseif(PUFF_CUDA STREQUAL "ON")
  set(CMAKE_CUDA_ARCHITECTURES "${PUFF_CUDA_RELEASE_ARCHITECTURES}")
  set(_puff_cuda_arch_reason "the release architectures (PUFF_CUDA=ON)")
else()
  _puff_local_cuda_architectures(_puff_local_archs)
  if(NOT _puff_local_archs)
    message(STATUS "puffadv: CUDA backend off: nvcc found (${CMAKE_CUDA_COMPILER}) but no NVIDIA GPU "
                   "on this machine, and PUFF_CUDA=AUTO compiles only for the GPUs it sees. "
                   "-C cmake.define.PUFF_CUDA=ON builds the release architectures "
                   "(${PUFF_CUDA_RELEASE_ARCHITECTURES}; minutes), "
                   "-C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 one of them.")
    return()
  endif()
  # A GPU nvcc has no machine code for (newer than this nvcc) gets PTX of the
  # nearest older architecture, which the driver compiles; one older than every
  # architecture nvcc knows (sm_50-72 under CUDA 13) gets nothing.
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-code
                  OUTPUT_VARIABLE _puff_nvcc_codes ERROR_QUIET RESULT_VARIABLE _puff_rc)
  string(REGEX MATCHALL "sm_[0-9]+" _puff_nvcc_codes "${_puff_nvcc_codes}")
  list(TRANSFORM _puff_nvcc_codes REPLACE "sm_" "")
  if(_puff_rc EQUAL 0 AND _puff_nvcc_codes)
    set(_puff_kept "")
    foreach(_arch IN LISTS _puff_local_archs)
      string(REPLACE "-real" "" _cc "${_arch}")
      set(_puff_below "")
      foreach(_code IN LISTS _puff_nvcc_codes)
        if(NOT _code GREATER _cc AND (NOT _puff_below OR _code GREATER _puff_below))
          set(_puff_below "${_code}")
        endif()
      endforeach()
      if(_cc IN_LIST _puff_nvcc_codes)
        list(APPEND _puff_kept "${_arch}")
      elseif(_puff_below)
        list(APPEND _puff_kept "${_puff_below}-virtual")
      else()
        message(STATUS "puffadv: this machine's sm_${_cc} GPU is older than any architecture "
                       "${CMAKE_CUDA_COMPILER} compiles for: not compiled for")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES _puff_kept)
    set(_puff_local_archs "${_puff_kept}")
  endif()
  if(NOT _puff_local_archs)
    message(STATUS "puffadv: CUDA backend off: no GPU of this machine can be compiled for")
    return()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_puff_local_archs}")
  set(_puff_cuda_arch_reason "this machine's GPUs (PUFF_CUDA=AUTO; PUFF_CUDA=ON builds the release ones)")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(PUFFADV_HAS_CUDA 1)

# backend() reports "cuda sm_75 sm_80 ... +PTX compute_90".
set(_puff_cuda_arch_report "")
foreach(_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(_arch MATCHES "^([0-9]+a?)-real$")
    list(APPEND _puff_cuda_arch_report "sm_${CMAKE_MATCH_1}")
  elseif(_arch MATCHES "^([0-9]+a?)-virtual$")
    list(APPEND _puff_cuda_arch_report "+PTX compute_${CMAKE_MATCH_1}")
  elseif(_arch MATCHES "^[0-9]+a?$")
    list(APPEND _puff_cuda_arch_report "sm_${_arch}" "+PTX compute_${_arch}")
  else()
    list(APPEND _puff_cuda_arch_report "${_arch}")
  endif()
endforeach()
string(JOIN " " _puff_cuda_arch_report ${_puff_cuda_arch_report})
string(STRIP "${PUFF_GPU_ARCHITECTURES} cuda ${_puff_cuda_arch_report} (nvcc ${CMAKE_CUDA_COMPILER_VERSION})"
       PUFF_GPU_ARCHITECTURES)
message(STATUS "puffadv: CUDA backend on: ${_puff_cuda_arch_report}, ${_puff_cuda_arch_reason}")

# The .cu files compile in an object library of their own: nvcc gets its own
# flags (no GCC warnings, no host LTO), and the objects join `target`. The
# runtime is linked statically, so the module imports where no toolkit is.
function(puff_add_cuda_sources target)
  add_library(puffadv_cuda OBJECT advantage_cuda.cu)
  set_target_properties(puffadv_cuda PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Static)
  target_include_directories(puffadv_cuda PRIVATE
    "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include" "${CMAKE_CURRENT_SOURCE_DIR}")
  # Device code: fast loads of read-only data; warnings as the rest of the project.
  target_compile_options(puffadv_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>)
  # The architectures of one file compile in parallel (the engine is one file,
  # advantage_cuda.cu): its kernels for the five default ones took 91 s on one
  # core and 48 s with this on two (measured when they were conventions_cuda.cu).
  if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA")
    target_compile_options(puffadv_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--threads=0>)
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:puffadv_cuda>)
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
endfunction()
