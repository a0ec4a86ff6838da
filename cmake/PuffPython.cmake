# The nanobind module puffadv._core, installed next to python/puffadv/, with its
# type stubs (_core.pyi, from nanobind's stubgen) beside it.
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT nanobind_ROOT)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE nanobind_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(_core NB_STATIC src/bindings.cpp src/python/bindings_arrays.cpp src/python/bindings_estimate.cpp
                    src/python/bindings_exchange.cpp
                    src/python/bindings_export_errors.cpp src/python/bindings_conventions.cpp)
target_include_directories(_core PRIVATE "${PROJECT_SOURCE_DIR}/src")  # private headers by their path under src/
target_link_libraries(_core PRIVATE puffadv)
puff_configure_cxx_target(_core)
# The core library sits in puffadv/lib inside the installed package.
if(APPLE)
  set_target_properties(_core PROPERTIES INSTALL_RPATH "@loader_path/lib")
else()
  set_target_properties(_core PROPERTIES INSTALL_RPATH "$ORIGIN/lib")
endif()
install(TARGETS _core LIBRARY DESTINATION puffadv COMPONENT python)

# Stubs: stubgen imports the freshly built module (the build tree's RPATH finds
# the core library), so they describe exactly this build: the JAX entry points
# appear only in builds that have them. Not for sanitizer builds (importing
# would need the ASan runtime preloaded) nor cross-compiled ones (cannot import).
option(PUFF_STUBS "Generate and install _core.pyi (nanobind stubgen)" ON)
if(PUFF_STUBS AND NOT PUFF_SANITIZE AND NOT CMAKE_CROSSCOMPILING)
  nanobind_add_stub(_core_stub
    MODULE _core
    OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/_core.pyi"
    PYTHON_PATH $<TARGET_FILE_DIR:_core>
    DEPENDS _core)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/_core.pyi" DESTINATION puffadv COMPONENT python)
endif()
