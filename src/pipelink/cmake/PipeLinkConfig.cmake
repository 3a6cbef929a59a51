# PipeLinkConfig.cmake - find_package(PipeLink) for native operator modules.
#
#   cmake -DPipeLink_DIR="$(pipelink cmake-dir)" ..
#   find_package(PipeLink REQUIRED)
#   pipelink_add_module(layernorm_module SOURCES src/layernorm_kernel.cu DESCRIPTOR src/layernorm.desc.h)
#
#   add_executable(app main.cpp)
#   target_link_libraries(app PRIVATE PipeLink::runtime)        # a C/C++ host of the native core
#
# Provides PipeLink::runtime: the include folder (pipelink.h, pipelink/runtime.h) for everything that
# links it, and libpipelink_runtime for executables only, so a module built with the seed's
# `target_link_libraries(mod PRIVATE PipeLink::runtime)` still never links against PipeLink (a host that
# is itself a shared library links PipeLink::runtime_library explicitly). Also PipeLink_INCLUDE_DIR,
# PipeLink_RUNTIME_LIBRARY, PipeLink_ABI_VERSION and pipelink_add_module().
cmake_minimum_required(VERSION 3.18)

get_filename_component(_PIPELINK_PKG "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(PipeLink_INCLUDE_DIR "${_PIPELINK_PKG}/include")
set(PipeLink_INCLUDE_DIRS "${PipeLink_INCLUDE_DIR}")
set(PipeLink_ABI_VERSION 1)
set(PipeLink_DESCHEADER "${_PIPELINK_PKG}/modules/descheader.py")

if(NOT EXISTS "${PipeLink_INCLUDE_DIR}/pipelink.h")
  set(PipeLink_FOUND FALSE)
  set(PipeLink_NOT_FOUND_MESSAGE "pipelink.h not found in ${PipeLink_INCLUDE_DIR}; reinstall PipeLink")
  return()
endif()

set(PipeLink_RUNTIME_LIBRARY "${_PIPELINK_PKG}/lib/libpipelink_runtime.so")

if(NOT TARGET PipeLink::runtime)
  add_library(PipeLink::runtime INTERFACE IMPORTED)
  set_target_properties(PipeLink::runtime PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${PipeLink_INCLUDE_DIR}")
  if(EXISTS "${PipeLink_RUNTIME_LIBRARY}")
    add_library(PipeLink::runtime_library SHARED IMPORTED)
    set_target_properties(PipeLink::runtime_library PROPERTIES
      IMPORTED_LOCATION "${PipeLink_RUNTIME_LIBRARY}"
      IMPORTED_NO_SONAME TRUE
      INTERFACE_INCLUDE_DIRECTORIES "${PipeLink_INCLUDE_DIR}")
    set_target_properties(PipeLink::runtime PROPERTIES INTERFACE_LINK_LIBRARIES
      "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:PipeLink::runtime_library>")
  else()
    message(WARNING "PipeLink: ${PipeLink_RUNTIME_LIBRARY} is missing (no C compiler when PipeLink was "
                    "installed); executables cannot link the native core. Build it with "
                    "`python -m pipelink.native.build` or reinstall PipeLink with a C compiler.")
  endif()
endif()

# pipelink_add_module(NAME SOURCES src... [DESCRIPTOR file.desc.h] [DEFINES A=1 ...] [OUTPUT_DIRECTORY dir])
# Builds lib<NAME>.so. With DESCRIPTOR, the manifest and version symbols are generated from the seed-style
# descriptor header at build time (Python 3 runs descheader.py; no import of the pipelink package).
function(pipelink_add_module NAME)
  cmake_parse_arguments(PLM "" "DESCRIPTOR;OUTPUT_DIRECTORY" "SOURCES;DEFINES" ${ARGN})
  if(NOT PLM_SOURCES)
    message(FATAL_ERROR "pipelink_add_module(${NAME}): SOURCES is required")
  endif()
  set(_sources ${PLM_SOURCES})
  if(PLM_DESCRIPTOR)
    get_filename_component(_desc "${PLM_DESCRIPTOR}" ABSOLUTE)
    set(_devices cpu)
    foreach(_src IN LISTS PLM_SOURCES)
      if(_src MATCHES "\\.cu$")
        set(_devices cuda)
      endif()
    endforeach()
    if(NOT Python3_EXECUTABLE)
      find_package(Python3 REQUIRED COMPONENTS Interpreter)
    endif()
    set(_generated "${CMAKE_CURRENT_BINARY_DIR}/${NAME}_pipelink_manifest.c")
    add_custom_command(
      OUTPUT "${_generated}"
      COMMAND "${Python3_EXECUTABLE}" "${PipeLink_DESCHEADER}" "${_desc}" -o "${_generated}" --devices ${_devices}
      DEPENDS "${_desc}" "${PipeLink_DESCHEADER}"
      COMMENT "PipeLink: manifest and version symbols from ${PLM_DESCRIPTOR}"
      VERBATIM)
    list(APPEND _sources "${_generated}")
  endif()
  add_library(${NAME} SHARED ${_sources})
  target_link_libraries(${NAME} PRIVATE PipeLink::runtime)
  if(PLM_DEFINES)
    target_compile_definitions(${NAME} PRIVATE ${PLM_DEFINES})
  endif()
  set_target_properties(${NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON PREFIX "lib")
  if(PLM_OUTPUT_DIRECTORY)
    set_target_properties(${NAME} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${PLM_OUTPUT_DIRECTORY}")
  endif()
endfunction()

set(PipeLink_FOUND TRUE)
