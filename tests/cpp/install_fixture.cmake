# ctest fixture: a fresh `cmake --install` of this build into PREFIX, as a user
# would run it. Stale files from an earlier run must not make the consumer pass.
#   cmake -DBUILD_DIR=... -DPREFIX=... -DCONFIG=... -P install_fixture.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" --config "${CONFIG}"
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (${result})")
endif()
file(GLOB_RECURSE configs "${PREFIX}/*/puffadvConfig.cmake")
if(NOT configs)
  message(FATAL_ERROR "no puffadvConfig.cmake under ${PREFIX}")
endif()
