# PipeLinkConfig.cmake - find_package(PipeLink) for native operator modules.
#
#   cmake -DPipeLink_DIR="$(pipelink cmake-dir)" ..
#   find_package(PipeLink REQUIRED)
#   pipelink_add_module(layernorm_module SOURCES src/layernorm_kernel.cu DESCRIPTOR src/layernorm.desc.h)
#
# Provides the INTERFACE target PipeLink::runtime (the include folder holding pipelink.h; modules never
# link against PipeLink), PipeLink_INCLUDE_DIR, PipeLink_ABI_VERSION and pipelink_add_module().
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

if(NOT TARGET PipeLink::runtime)
  add_library(PipeLink::runtime INTERFACE IMPORTED)
  set_target_properties(PipeLink::runtime PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${PipeLink_INCLUDE_DIR}")
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
