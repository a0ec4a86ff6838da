# Install rules. Under scikit-build-core everything goes inside the Python
# package (puffadv/lib, puffadv/include); a plain CMake install uses GNU dirs.
include(GNUInstallDirs)
if(SKBUILD)
  set(PUFF_INSTALL_LIBDIR puffadv/lib)
  set(PUFF_INSTALL_INCLUDEDIR puffadv/include)
else()
  set(PUFF_INSTALL_LIBDIR ${CMAKE_INSTALL_LIBDIR})
  set(PUFF_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
endif()

install(TARGETS puffadv EXPORT puffadvTargets
        LIBRARY DESTINATION ${PUFF_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${PUFF_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${PUFF_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${PUFF_INSTALL_INCLUDEDIR})
install(FILES include/puffadv/puffadv.hpp include/puffadv/array.hpp
              "${PROJECT_BINARY_DIR}/include/puffadv/config.hpp"
        DESTINATION ${PUFF_INSTALL_INCLUDEDIR}/puffadv)
