# The HIP source run on the CPU: -DPUFF_HIP_CPU=<path to ROCm's HIP CPU Runtime>
# builds tests/hip_cpu, a GoogleTest program (ctest label `hip_cpu`) that
# compiles the HIP translation units (PUFF_HIP_SOURCES, cmake/PuffHIP.cmake) as
# plain C++ against that runtime (64-lane wavefronts as fibers), with the core's
# C++ sources built with PUFFADV_HAS_HIP=1, and compares every estimator on
# "rocm" arrays (host memory) with the CPU backend.
#
# The runtime needs GCC's parallel algorithms with TBB (Debian: libtbb-dev).
# `<<<>>>` launches are no C++: the build copies src/gpu and the HIP units into
# the build tree with each `kernel<<<cfg>>>(args)` rewritten into
# `hip_cpu::launch(...)(args)` (src/gpu/vendor.cuh, PUFF_HIP_CPU); nothing else
# in the copies differs from the source.

if(NOT EXISTS "${PUFF_HIP_CPU}/include/hip/hip_runtime.h")
  message(FATAL_ERROR "PUFF_HIP_CPU=${PUFF_HIP_CPU} is not the HIP CPU Runtime (no include/hip/hip_runtime.h)")
endif()
if(NOT PUFF_HIP_SOURCES)
  message(FATAL_ERROR "PUFF_HIP_SOURCES (cmake/PuffHIP.cmake) is empty: no HIP sources to build on the CPU")
endif()
find_package(TBB QUIET)
if(NOT TBB_FOUND)
  message(FATAL_ERROR "PUFF_HIP_CPU needs TBB for GCC's parallel algorithms (apt-get install libtbb-dev)")
endif()

# Copies of src/gpu/* and the HIP units with the launches rewritten.
function(_puff_hip_cpu_rewrite source dest)
  file(READ "${source}" text)
  # name or name<template args>, <<<config>>>( ; the config holds no ">>".
  string(REGEX REPLACE
    "([A-Za-z_][A-Za-z0-9_]*(<[^<>;{}]*>)?)<<<(([^>]|>[^>])*)>>>\\("
    "::puffadv::gpu::hip_cpu::launch(\"\\1\", __PRETTY_FUNCTION__, \\3, [=](const auto&... puff_args_) { \\1(puff_args_...); })("
    text "${text}")
  string(FIND "${text}" "<<<" left)
  if(NOT left EQUAL -1)
    message(FATAL_ERROR "cmake/PuffHIPCPU.cmake: a launch in ${source} is not in the form name<args><<<config>>>(")
  endif()
  # Written only when changed, so that a reconfigure rebuilds nothing by itself.
  file(WRITE "${dest}.new" "${text}")
  file(COPY_FILE "${dest}.new" "${dest}" ONLY_IF_DIFFERENT)
  file(REMOVE "${dest}.new")
endfunction()

set(PUFF_HIP_CPU_SOURCE_DIR "${PROJECT_BINARY_DIR}/hip_cpu_src")
file(GLOB _puff_gpu_files CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/gpu/*")
set(PUFF_HIP_CPU_SOURCES "")
foreach(_f IN LISTS _puff_gpu_files)
  file(RELATIVE_PATH _rel "${PROJECT_SOURCE_DIR}/src" "${_f}")
  _puff_hip_cpu_rewrite("${_f}" "${PUFF_HIP_CPU_SOURCE_DIR}/${_rel}")
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_f}")
endforeach()
foreach(_rel IN LISTS PUFF_HIP_SOURCES)
  _puff_hip_cpu_rewrite("${PROJECT_SOURCE_DIR}/src/${_rel}" "${PUFF_HIP_CPU_SOURCE_DIR}/${_rel}")
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               "${PROJECT_SOURCE_DIR}/src/${_rel}")
  list(APPEND PUFF_HIP_CPU_SOURCES "${PUFF_HIP_CPU_SOURCE_DIR}/${_rel}")
endforeach()

# The core's C++ sources (the library target's, whatever folders list them),
# built again with PUFFADV_HAS_HIP=1 from a config header of their own.
get_target_property(_puff_core_sources puffadv SOURCES)
get_target_property(_puff_core_dir puffadv SOURCE_DIR)
set(PUFF_HIP_CPU_CORE_SOURCES "")
foreach(_s IN LISTS _puff_core_sources)
  if(_s MATCHES "^\\$<" OR NOT _s MATCHES "\\.cpp$")
    continue()
  endif()
  if(NOT IS_ABSOLUTE "${_s}")
    set(_s "${_puff_core_dir}/${_s}")
  endif()
  list(APPEND PUFF_HIP_CPU_CORE_SOURCES "${_s}")
endforeach()
get_target_property(PUFF_HIP_CPU_CORE_DEFINITIONS puffadv COMPILE_DEFINITIONS)
if(NOT PUFF_HIP_CPU_CORE_DEFINITIONS)
  set(PUFF_HIP_CPU_CORE_DEFINITIONS "")
endif()
# backend()'s build facts are defined on build_info.cpp alone (src/CMakeLists.txt), a
# source property, which CMake keeps per directory: tests/hip_cpu sets them again.
set(PUFF_HIP_CPU_BUILD_INFO "${_puff_core_dir}/core/build_info.cpp")
get_source_file_property(PUFF_HIP_CPU_BUILD_FACTS "${PUFF_HIP_CPU_BUILD_INFO}"
                         DIRECTORY "${_puff_core_dir}" COMPILE_DEFINITIONS)
if(NOT PUFF_HIP_CPU_BUILD_FACTS)
  message(FATAL_ERROR "PUFF_HIP_CPU: no build facts on ${PUFF_HIP_CPU_BUILD_INFO} (src/CMakeLists.txt sets them)")
endif()

enable_testing()
add_subdirectory("${PROJECT_SOURCE_DIR}/tests/hip_cpu" "${PROJECT_BINARY_DIR}/tests/hip_cpu")
