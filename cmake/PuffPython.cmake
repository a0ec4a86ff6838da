# The nanobind module puffadv._core, installed next to python/puffadv/.
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT nanobind_ROOT)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE nanobind_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(_core NB_STATIC src/bindings.cpp src/bindings_arrays.cpp src/bindings_exchange.cpp
                    src/bindings_conventions.cpp)
target_link_libraries(_core PRIVATE puffadv)
puff_configure_cxx_target(_core)
# The core library sits in puffadv/lib inside the installed package.
set_target_properties(_core PROPERTIES INSTALL_RPATH "$ORIGIN/lib")
install(TARGETS _core LIBRARY DESTINATION puffadv COMPONENT python)
