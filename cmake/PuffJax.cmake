# XLA FFI handlers for JAX: PUFF_JAX=AUTO|ON|OFF. Sets PUFF_HAS_JAX (0/1).
# The handlers use XLA's header-only FFI API from jax.ffi.include_dir() of the
# jax importable at build time; nothing links against jaxlib. They are compiled
# into the nanobind module _core, so they need PUFF_PYTHON.
#
# Headers record their FFI API version (jaxlib 0.10.x ships API 0.3, 0.11.x
# API 0.4) and XLA refuses handlers newer than itself: build against the
# OLDEST jaxlib you run (README: "JAX").

set(PUFF_HAS_JAX 0)
if(PUFF_JAX STREQUAL "OFF")
  return()
endif()
if(NOT PUFF_PYTHON)
  if(PUFF_JAX STREQUAL "ON")
    message(FATAL_ERROR "PUFF_JAX=ON: the JAX handlers live in the Python module; set PUFF_PYTHON=ON")
  endif()
  return()
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
          "import jax, jaxlib.version; print(jax.ffi.include_dir()); print(jaxlib.version.__version__)"
  OUTPUT_VARIABLE _puff_jax_out ERROR_VARIABLE _puff_jax_err
  RESULT_VARIABLE _puff_jax_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _puff_jax_rc EQUAL 0)
  string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" _puff_jax_err "${_puff_jax_err}")
  if(PUFF_JAX STREQUAL "ON")
    message(FATAL_ERROR "PUFF_JAX=ON but ${Python_EXECUTABLE} cannot import jax "
                        "(${_puff_jax_err}); pip install jax, or build with PUFF_JAX=OFF")
  endif()
  message(STATUS "puffadv: JAX handlers off (jax not importable: ${_puff_jax_err})")
  return()
endif()
string(REPLACE "\n" ";" _puff_jax_out "${_puff_jax_out}")
list(GET _puff_jax_out 0 PUFF_JAX_INCLUDE_DIR)
list(GET _puff_jax_out 1 PUFF_JAXLIB_VERSION)
if(NOT EXISTS "${PUFF_JAX_INCLUDE_DIR}/xla/ffi/api/ffi.h")
  if(PUFF_JAX STREQUAL "ON")
    message(FATAL_ERROR "PUFF_JAX=ON but jaxlib ${PUFF_JAXLIB_VERSION} ships no "
                        "${PUFF_JAX_INCLUDE_DIR}/xla/ffi/api/ffi.h")
  endif()
  message(STATUS "puffadv: JAX handlers off (no XLA FFI headers in ${PUFF_JAX_INCLUDE_DIR})")
  return()
endif()

file(STRINGS "${PUFF_JAX_INCLUDE_DIR}/xla/ffi/api/c_api.h" _puff_ffi_version
     REGEX "^#define XLA_FFI_API_(MAJOR|MINOR) [0-9]+")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*" "\\1.\\2" PUFF_JAX_FFI_API "${_puff_ffi_version}")

set(PUFF_HAS_JAX 1)
target_sources(_core PRIVATE
  "${PROJECT_SOURCE_DIR}/src/jax/ffi_handlers.cpp"     # every estimator's handlers (XLA FFI), one call into the core
  "${PROJECT_SOURCE_DIR}/src/jax/argument_checks.cpp"  # the core's checks on shapes and dtypes
  "${PROJECT_SOURCE_DIR}/src/jax/register.cpp")        # their capsules, for Python
# SYSTEM: XLA's headers are not ours to warn about.
target_include_directories(_core SYSTEM PRIVATE "${PUFF_JAX_INCLUDE_DIR}")
target_compile_definitions(_core PRIVATE
  PUFF_HAS_JAX=1
  PUFF_JAXLIB_BUILD_VERSION="${PUFF_JAXLIB_VERSION}")
message(STATUS "puffadv: JAX handlers on (XLA FFI API ${PUFF_JAX_FFI_API}, headers of jaxlib "
               "${PUFF_JAXLIB_VERSION}; a jaxlib with an older FFI API refuses them)")
