# Install rules and the CMake package: find_package(puffadv CONFIG) gives
# puffadv::puffadv, the core library with whichever GPU backends this build has.
#
# Under scikit-build-core everything goes inside the Python package
# (puffadv/lib, puffadv/include, puffadv/lib/cmake/puffadv, which is what
# `python -m puffadv --cmake-dir` prints); a plain CMake install uses GNU dirs.
# The build tree is a usable package too (puffadv_DIR=<build dir>).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(SKBUILD)
  set(PUFF_INSTALL_LIBDIR puffadv/lib)
  set(PUFF_INSTALL_INCLUDEDIR puffadv/include)
  # Wheels cannot hold symlinks: the .so/.so.0.1/.so.0.1.0 chain would become
  # three copies of the library. Inside a wheel one unversioned file is enough.
  set_property(TARGET puffadv PROPERTY VERSION)
  set_property(TARGET puffadv PROPERTY SOVERSION)
else()
  set(PUFF_INSTALL_LIBDIR ${CMAKE_INSTALL_LIBDIR})
  set(PUFF_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
endif()
set(PUFF_INSTALL_CMAKEDIR ${PUFF_INSTALL_LIBDIR}/cmake/puffadv)

# Consumers may test the backends without including a header; the values are
# the ones config.hpp defines, so the header's #define is an identical redefinition.
target_compile_definitions(puffadv INTERFACE
  PUFFADV_HAS_CUDA=${PUFFADV_HAS_CUDA}
  PUFFADV_HAS_HIP=${PUFFADV_HAS_HIP})

# INCLUDES DESTINATION is the installed include dir of the imported target (it
# differs between the wheel and a plain install, so it is not set in src/).
install(TARGETS puffadv EXPORT puffadvTargets
        LIBRARY DESTINATION ${PUFF_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${PUFF_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${PUFF_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${PUFF_INSTALL_INCLUDEDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/puffadv" DESTINATION ${PUFF_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES "${PROJECT_BINARY_DIR}/include/puffadv/config.hpp"
        DESTINATION ${PUFF_INSTALL_INCLUDEDIR}/puffadv)

# find_dependency only for what consumers must link themselves: private links of
# a shared library (Threads, static cudart) stay inside it; a static core or a
# public GPU runtime target would appear in INTERFACE_LINK_LIBRARIES.
get_target_property(_puff_interface_links puffadv INTERFACE_LINK_LIBRARIES)
set(PUFF_CONFIG_DEPENDENCIES "")
if(_puff_interface_links MATCHES "Threads::")
  string(APPEND PUFF_CONFIG_DEPENDENCIES "find_dependency(Threads)\n")
endif()
if(_puff_interface_links MATCHES "CUDA::")
  string(APPEND PUFF_CONFIG_DEPENDENCIES "find_dependency(CUDAToolkit)\n")
endif()
if(_puff_interface_links MATCHES "hip::")
  string(APPEND PUFF_CONFIG_DEPENDENCIES "find_dependency(hip)\n")
endif()

# 0.x: a minor release may change the API, so only the same major.minor matches.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/puffadvConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

# Installed config (relocatable: paths are relative to the config file).
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/puffadvConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake-install/puffadvConfig.cmake"
  INSTALL_DESTINATION ${PUFF_INSTALL_CMAKEDIR})
install(EXPORT puffadvTargets NAMESPACE puffadv:: DESTINATION ${PUFF_INSTALL_CMAKEDIR})
install(FILES "${PROJECT_BINARY_DIR}/cmake-install/puffadvConfig.cmake"
              "${PROJECT_BINARY_DIR}/puffadvConfigVersion.cmake"
        DESTINATION ${PUFF_INSTALL_CMAKEDIR})

# Build-tree config, for consumers of an uninstalled build (and its ctest).
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/puffadvConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/puffadvConfig.cmake"
  INSTALL_DESTINATION "${PROJECT_BINARY_DIR}" INSTALL_PREFIX "${PROJECT_BINARY_DIR}")
export(EXPORT puffadvTargets NAMESPACE puffadv:: FILE "${PROJECT_BINARY_DIR}/puffadvTargets.cmake")
