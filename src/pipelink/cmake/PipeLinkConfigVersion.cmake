# PipeLinkConfigVersion.cmake - the package version for find_package(PipeLink [VERSION]).
# Same major is compatible (the C ABI is versioned separately: PipeLink_ABI_VERSION in PipeLinkConfig.cmake).
set(PACKAGE_VERSION "0.1.0")
if(PACKAGE_FIND_VERSION)
  if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR
     NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "0")
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
    if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
      set(PACKAGE_VERSION_EXACT TRUE)
    endif()
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
