# CUDA backend: PUFF_CUDA=AUTO|ON|OFF. Sets PUFFADV_HAS_CUDA (0/1), defines
# puff_add_cuda_sources(target) and appends to PUFF_GPU_ARCHITECTURES.
#
# Architectures (override with -DCMAKE_CUDA_ARCHITECTURES=90, or CUDAARCHS):
#   75 Turing (T4, RTX 20xx)      80 Ampere (A100, A30)      86 Ampere (RTX 30xx, A10, A40)
#   89 Ada (L4, L40, RTX 40xx)    90 Hopper (H100, H200)
# The default builds machine code for each and PTX for 90, which the driver
# compiles for newer GPUs (Blackwell) at first use. CUDA 13 dropped sm_50-72.
set(PUFFADV_HAS_CUDA 0)
if(NOT DEFINED PUFF_GPU_ARCHITECTURES)
  set(PUFF_GPU_ARCHITECTURES "")
endif()
if(PUFF_CUDA STREQUAL "OFF")
  return()
endif()

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

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES "75-real;80-real;86-real;89-real;90")
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
message(STATUS "puffadv: CUDA backend on: ${_puff_cuda_arch_report}")

# The .cu files compile in an object library of their own: nvcc gets its own
# flags (no GCC warnings, no host LTO), and the objects join `target`. The
# runtime is linked statically, so the module imports where no toolkit is.
function(puff_add_cuda_sources target)
  add_library(puffadv_cuda OBJECT advantage_cuda.cu conventions_cuda.cu)
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
  # The architectures of one file compile in parallel: conventions_cuda.cu for
  # the five default ones took 91 s on one core and 48 s with this on two.
  if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA")
    target_compile_options(puffadv_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--threads=0>)
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:puffadv_cuda>)
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
endfunction()
