# Optimisation, link-time optimisation and sanitizer flags, in one place, so
# that backend() can report them.

include(CheckIPOSupported)

# Release builds: -O3 (CMake's Release default). Link-time optimisation is
# opt-in (-DPUFF_LTO=ON): the hot loops are templates instantiated inside each
# translation unit, so LTO has little to inline across units, while GCC's LTO
# link of the core took about 5 minutes of one core, in every build and out of
# ccache's reach (measured 2026-12-04, see docs/benchmarks.md "Build").
option(PUFF_LTO "Link-time optimisation of the core (Release builds)" OFF)
if(PUFF_LTO)
  if(NOT CMAKE_BUILD_TYPE STREQUAL "Release" OR PUFF_SANITIZE)
    set(PUFF_LTO OFF)
  else()
    check_ipo_supported(RESULT _puff_ipo_ok OUTPUT _puff_ipo_msg LANGUAGES CXX)
    if(NOT _puff_ipo_ok)
      message(WARNING "PUFF_LTO=ON but the toolchain has no LTO: ${_puff_ipo_msg}")
      set(PUFF_LTO OFF)
    endif()
  endif()
endif()

# Debug: -O0 stated explicitly. CMake's Debug default is only -g, so a CXXFLAGS
# from the environment (conda exports -O2) would otherwise optimise a debug build.
set(PUFF_DEBUG_FLAGS "")
if(CMAKE_BUILD_TYPE STREQUAL "Debug" AND NOT MSVC)
  set(PUFF_DEBUG_FLAGS -O0)
  if(NOT CMAKE_CXX_FLAGS_DEBUG MATCHES "(^| )-g")
    list(APPEND PUFF_DEBUG_FLAGS -g)
  endif()
endif()

set(PUFF_SANITIZER_FLAGS "")
if(PUFF_SANITIZE)
  if(MSVC)
    message(FATAL_ERROR "PUFF_SANITIZE=ON needs GCC or Clang")
  endif()
  # bounds: array-index checks; no-recover: a UBSan report fails the test run.
  set(PUFF_SANITIZER_FLAGS
      -fsanitize=address,undefined -fsanitize=bounds -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer)
endif()

# Applies the project's flags to a target compiled from C++ sources.
function(puff_configure_cxx_target target)
  if(NOT MSVC)
    target_compile_options(${target} PRIVATE -Wall -Wextra)
  endif()
  if(PUFF_DEBUG_FLAGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PUFF_DEBUG_FLAGS}>)
  endif()
  if(PUFF_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PUFF_SANITIZER_FLAGS}>)
    target_link_options(${target} PRIVATE ${PUFF_SANITIZER_FLAGS})
  endif()
  if(PUFF_LTO)
    set_property(TARGET ${target} PROPERTY INTERPROCEDURAL_OPTIMIZATION ON)
  endif()
endfunction()

# Reported by backend(): the flags the core's C++ sources were compiled with.
string(TOUPPER "${CMAKE_BUILD_TYPE}" _puff_bt)
string(JOIN " " PUFF_REPORTED_CXX_FLAGS ${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_puff_bt}} ${PUFF_DEBUG_FLAGS}
       ${PUFF_SANITIZER_FLAGS})
if(PUFF_LTO)
  string(APPEND PUFF_REPORTED_CXX_FLAGS " (LTO)")
endif()
string(STRIP "${PUFF_REPORTED_CXX_FLAGS}" PUFF_REPORTED_CXX_FLAGS)
