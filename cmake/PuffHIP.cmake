# HIP backend (AMD ROCm): PUFF_HIP=AUTO|ON|OFF. Sets PUFFADV_HAS_HIP (0/1),
# defines puff_add_hip_sources(target) and appends to PUFF_GPU_ARCHITECTURES.
#
# The same kernel source as CUDA (src/gpu/*.cuh), compiled as LANGUAGE HIP by
# a HIP-capable clang. Architectures:
#   gfx90a  CDNA2 (MI210, MI250X), 64-wide wavefronts: the release default.
#   gfx942  CDNA3 (MI300X) needs ROCm >= 5.7 device libraries (Debian 12's 5.2 lacks them).
#   gfx1100 RDNA3 (RX 7900), 32-wide wavefronts.
# Which ones a build compiles, as for CUDA: CMAKE_HIP_ARCHITECTURES (or HIPARCHS) if
# given; else PUFF_HIP=ON: PUFF_HIP_RELEASE_ARCHITECTURES; else (AUTO) the AMD GPUs
# of this machine (rocm_agent_enumerator), and no HIP backend when there is none.
# Debian 12 (apt install hipcc: ROCm 5.2, clang 15) has no /opt/rocm: this file
# then picks clang++-15 and points it at /usr and Debian's device bitcode.
# CMake >= 3.28 is needed there (pip install cmake).
set(PUFF_HIP_RELEASE_ARCHITECTURES gfx90a)
# The HIP translation units, relative to src/: compiled as HIP here, and as plain
# C++ against the HIP CPU Runtime by the test build (cmake/PuffHIPCPU.cmake).
set(PUFF_HIP_SOURCES advantage_hip.cpp)
set(PUFFADV_HAS_HIP 0)
if(NOT DEFINED PUFF_GPU_ARCHITECTURES)
  set(PUFF_GPU_ARCHITECTURES "")
endif()
if(PUFF_HIP STREQUAL "OFF")
  return()
endif()

function(_puff_hip_unavailable why)
  if(PUFF_HIP STREQUAL "ON")
    message(FATAL_ERROR "PUFF_HIP=ON but ${why}. Install ROCm (or on Debian/Ubuntu: apt install "
      "hipcc) and pass -DCMAKE_HIP_COMPILER=<ROCm's or LLVM's clang++>; or build with PUFF_HIP=OFF.")
  endif()
  message(STATUS "puffadv: HIP backend off (${why}; PUFF_HIP=AUTO)")
endfunction()

if(CMAKE_VERSION VERSION_LESS 3.28)
  _puff_hip_unavailable("CMake ${CMAKE_VERSION} is older than 3.28, which the HIP language needs here (pip install cmake)")
  return()
endif()

set(_puff_debian_bitcode /usr/lib/x86_64-linux-gnu/amdgcn/bitcode)
if(NOT DEFINED CMAKE_HIP_PLATFORM AND NOT DEFINED ENV{HIP_PLATFORM})
  set(CMAKE_HIP_PLATFORM amd)  # never let nvcc stand in for a HIP compiler
elseif(NOT DEFINED CMAKE_HIP_PLATFORM)
  set(CMAKE_HIP_PLATFORM "$ENV{HIP_PLATFORM}")
endif()
if(NOT CMAKE_HIP_PLATFORM STREQUAL "amd")
  _puff_hip_unavailable("HIP_PLATFORM is '${CMAKE_HIP_PLATFORM}'; the HIP backend targets AMD GPUs (NVIDIA GPUs use PUFF_CUDA)")
  return()
endif()
if(PUFF_HIP STREQUAL "AUTO" AND NOT DEFINED CMAKE_HIP_COMPILER AND NOT DEFINED ENV{HIPCXX}
   AND NOT EXISTS /opt/rocm AND NOT DEFINED ENV{ROCM_PATH})
  # AUTO builds HIP only where ROCm is installed or a HIP compiler is named: a
  # distribution's clang alone is no sign that anyone wants a HIP build.
  _puff_hip_unavailable("no ROCm installation (/opt/rocm, ROCM_PATH) and no CMAKE_HIP_COMPILER")
  return()
endif()
if(NOT DEFINED CMAKE_HIP_COMPILER AND NOT DEFINED ENV{HIPCXX} AND NOT EXISTS /opt/rocm
   AND EXISTS "${_puff_debian_bitcode}")
  find_program(_puff_hip_clang NAMES clang++-15 clang++-16 clang++-17
               PATHS /usr/lib/llvm-15/bin /usr/lib/llvm-16/bin /usr/lib/llvm-17/bin)
  if(_puff_hip_clang)
    set(CMAKE_HIP_COMPILER "${_puff_hip_clang}")
    set(CMAKE_HIP_FLAGS "${CMAKE_HIP_FLAGS} --rocm-path=/usr --rocm-device-lib-path=${_puff_debian_bitcode}")
  endif()
endif()

include(CheckLanguage)
check_language(HIP)
if(NOT CMAKE_HIP_COMPILER)
  _puff_hip_unavailable("no HIP compiler was found")
  return()
endif()
if(DEFINED CMAKE_HIP_ARCHITECTURES OR DEFINED ENV{HIPARCHS})
  set(_puff_hip_arch_reason "as requested (CMAKE_HIP_ARCHITECTURES / HIPARCHS)")
elseif(PUFF_HIP STREQUAL "ON")
  set(CMAKE_HIP_ARCHITECTURES "${PUFF_HIP_RELEASE_ARCHITECTURES}")
  set(_puff_hip_arch_reason "the release architectures (PUFF_HIP=ON)")
else()
  # AUTO: the GPUs ROCm sees (gfx000 is the CPU agent). The tool exits non-zero without a GPU.
  find_program(PUFF_ROCM_AGENT_ENUMERATOR rocm_agent_enumerator
               HINTS "$ENV{ROCM_PATH}/bin" /opt/rocm/bin)
  set(_puff_local_gfx "")
  if(PUFF_ROCM_AGENT_ENUMERATOR)
    execute_process(COMMAND "${PUFF_ROCM_AGENT_ENUMERATOR}" OUTPUT_VARIABLE _puff_agents
                    ERROR_QUIET RESULT_VARIABLE _puff_rc TIMEOUT 30)
    if(_puff_rc EQUAL 0)
      string(REGEX MATCHALL "gfx[0-9a-f]+" _puff_local_gfx "${_puff_agents}")
      list(REMOVE_ITEM _puff_local_gfx gfx000)
      list(REMOVE_DUPLICATES _puff_local_gfx)
    endif()
  endif()
  if(NOT _puff_local_gfx)
    _puff_hip_unavailable("a HIP compiler was found but no AMD GPU on this machine, and AUTO compiles only for the GPUs it sees; -C cmake.define.PUFF_HIP=ON builds the release architectures (${PUFF_HIP_RELEASE_ARCHITECTURES})")
    return()
  endif()
  set(CMAKE_HIP_ARCHITECTURES "${_puff_local_gfx}")
  set(_puff_hip_arch_reason "this machine's GPUs (PUFF_HIP=AUTO)")
endif()
enable_language(HIP)
find_library(PUFF_AMDHIP64 amdhip64 HINTS "$ENV{ROCM_PATH}/lib" /opt/rocm/lib)
if(NOT PUFF_AMDHIP64)
  _puff_hip_unavailable("the HIP runtime library (libamdhip64) was not found")
  return()
endif()
set(PUFFADV_HAS_HIP 1)
string(REPLACE ";" " " _puff_hip_archs "${CMAKE_HIP_ARCHITECTURES}")
string(STRIP "${PUFF_GPU_ARCHITECTURES} hip ${_puff_hip_archs} (${CMAKE_HIP_COMPILER_ID} ${CMAKE_HIP_COMPILER_VERSION})"
       PUFF_GPU_ARCHITECTURES)
message(STATUS "puffadv: HIP backend on: ${_puff_hip_archs}, ${_puff_hip_arch_reason}")

# Like the CUDA sources: an object library of its own, joined to `target`.
# PUFF_HIP selects the HIP names in src/gpu/vendor.cuh.
function(puff_add_hip_sources target)
  set_source_files_properties(${PUFF_HIP_SOURCES} PROPERTIES LANGUAGE HIP)
  add_library(puffadv_hip OBJECT ${PUFF_HIP_SOURCES})
  set_target_properties(puffadv_hip PROPERTIES
    POSITION_INDEPENDENT_CODE ON HIP_STANDARD 17 HIP_STANDARD_REQUIRED ON)
  target_compile_definitions(puffadv_hip PRIVATE PUFF_HIP=1)
  target_include_directories(puffadv_hip PRIVATE
    "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include" "${CMAKE_CURRENT_SOURCE_DIR}")
  target_compile_options(puffadv_hip PRIVATE -Wall -Wextra)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:puffadv_hip>)
  target_link_libraries(${target} PRIVATE "${PUFF_AMDHIP64}")
  # The HIP objects need only the HIP runtime at link time; linking with clang
  # would drop the GCC LTO objects of the C++ sources.
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
endfunction()
