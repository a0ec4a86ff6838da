# Configures, builds and runs the consumer project (consumer/ + examples/cpp)
# against a puffadv package, then compares the example's output with known values.
#   cmake -DSOURCE_DIR=tests/cpp/consumer -DBINARY_DIR=... -DPACKAGE_PREFIX=<CMAKE_PREFIX_PATH>
#         -DEXPECTED_DIR=... -DEXAMPLE_DIR=examples/cpp -DEXPECTED_OUTPUT=... -DVERSION=...
#         -DCONFIG=Release [-DGENERATOR=... -DCXX_COMPILER=... -DMAKE_PROGRAM=... -DCXX_FLAGS=...]
#         -P run_consumer.cmake
function(run_step label)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${label} failed (${result}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${BINARY_DIR}")
set(optional "")
if(GENERATOR)
  list(APPEND optional -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND optional "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(MAKE_PROGRAM)
  list(APPEND optional "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
# Only PACKAGE_PREFIX should supply puffadv: no package registries; consumer/
# checks that puffadv_DIR lies under EXPECTED_DIR.
run_step("configure" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" ${optional}
         "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CXX_FLAGS}"
         "-DCMAKE_PREFIX_PATH=${PACKAGE_PREFIX}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
         -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
         "-DPUFF_EXPECTED_VERSION=${VERSION}" "-DPUFF_EXPECTED_DIR=${EXPECTED_DIR}"
         "-DPUFF_EXAMPLE_DIR=${EXAMPLE_DIR}")
run_step("build" "${CMAKE_COMMAND}" --build "${BINARY_DIR}" --config "${CONFIG}")

set(bin "${BINARY_DIR}/bin/${CONFIG}")
run_step("version check" "${bin}/puffadv_version_check")
message(STATUS "${step_output}")
run_step("example" "${bin}/puffadv_example")
file(READ "${EXPECTED_OUTPUT}" expected)
string(REPLACE "\r\n" "\n" actual "${step_output}")
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "examples/cpp printed:\n${actual}\nexpected (${EXPECTED_OUTPUT}):\n${expected}")
endif()
message(STATUS "examples/cpp output matches ${EXPECTED_OUTPUT}:\n${actual}")
