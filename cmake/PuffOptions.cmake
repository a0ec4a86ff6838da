# Build options. The tri-state ones take AUTO (use what is found), ON (require it:
# a configure error names what is missing) or OFF.

function(puff_tristate name default doc)
  set(${name} "${default}" CACHE STRING "${doc} (AUTO|ON|OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(value MATCHES "^(1|YES|TRUE|Y)$")
    set(value ON)
  elseif(value MATCHES "^(0|NO|FALSE|N)$")
    set(value OFF)
  endif()
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name}=${${name}}: expected AUTO, ON or OFF")
  endif()
  set(${name} "${value}" PARENT_SCOPE)
endfunction()

puff_tristate(PUFF_CUDA AUTO "Build the CUDA backend")
puff_tristate(PUFF_HIP AUTO "Build the HIP (ROCm) backend")
puff_tristate(PUFF_TORCH AUTO "Build the TORCH_LIBRARY operator library")
puff_tristate(PUFF_JAX AUTO "Build the XLA FFI handlers for JAX")

option(PUFF_SANITIZE "Build the CPU code with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(SKBUILD)
  set(_puff_python_default ON)
else()
  set(_puff_python_default OFF)
endif()
option(PUFF_PYTHON "Build the nanobind module (on by default under scikit-build-core)" ${_puff_python_default})

# C++ tests default on for a top-level CMake build, off for pip installs.
if(PROJECT_IS_TOP_LEVEL AND NOT SKBUILD)
  set(_puff_tests_default ON)
else()
  set(_puff_tests_default OFF)
endif()
option(PUFF_TESTS "Build the C++ tests (GoogleTest) and register them with ctest" ${_puff_tests_default})
