# Imported targets for attnkit's link dependencies that have no CMake package on Debian 12:
#   attnkit::openblas  OpenBLAS built with OpenMP (libopenblas-openmp-dev), with its <cblas.h>
#   attnkit::stb       stb_image (libstb-dev), included as <stb/stb_image.h>
#   attnkit::dnnl      oneDNN (libdnnl-dev), optional: conv2d's oneDNN convolution (ATTNKIT_WITH_DNNL).
#                      Its own dnnl-config.cmake (Debian's build has the OpenCL GPU runtime) demands
#                      the OpenCL headers even for CPU use, so the header and library are found directly.
# Included by CMakeLists.txt and by the installed attnkitConfig.cmake, so the exported targets name
# these targets instead of absolute paths and each consumer finds the libraries on its own system.
# Debian installs several OpenBLAS builds side by side; the OpenMP one is chosen so that BLAS called
# inside attnkit's parallel regions runs single-threaded instead of oversubscribing. Setting the
# cache variables ATTNKIT_OPENBLAS / ATTNKIT_CBLAS_INCLUDE / ATTNKIT_STB / ATTNKIT_DNNL beforehand
# overrides the search. Sets ATTNKIT_IMPORTED_LIBS_FOUND (OpenBLAS and stb, both required) and
# ATTNKIT_DNNL_FOUND.

# Defines the imported target `target` from the library path in the variable named `library_var`
# and the include directory in `include_var`, when both were found.
function(attnkit_add_imported_library target library_var include_var)
  if(${library_var} AND ${include_var})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${${library_var}}" INTERFACE_INCLUDE_DIRECTORIES "${${include_var}}")
  endif()
endfunction()

set(ATTNKIT_OPENBLAS_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp")

if(NOT TARGET attnkit::openblas)
  find_library(ATTNKIT_OPENBLAS openblas PATHS "${ATTNKIT_OPENBLAS_DIR}" NO_DEFAULT_PATH)
  find_path(ATTNKIT_CBLAS_INCLUDE cblas.h
    PATHS "/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp" NO_DEFAULT_PATH)
  attnkit_add_imported_library(attnkit::openblas ATTNKIT_OPENBLAS ATTNKIT_CBLAS_INCLUDE)
endif()

if(NOT TARGET attnkit::stb)
  find_library(ATTNKIT_STB stb)
  find_path(ATTNKIT_STB_INCLUDE stb/stb_image.h)
  attnkit_add_imported_library(attnkit::stb ATTNKIT_STB ATTNKIT_STB_INCLUDE)
endif()

if(NOT TARGET attnkit::dnnl)
  find_library(ATTNKIT_DNNL dnnl)
  find_path(ATTNKIT_DNNL_INCLUDE dnnl.hpp)
  attnkit_add_imported_library(attnkit::dnnl ATTNKIT_DNNL ATTNKIT_DNNL_INCLUDE)
endif()
if(TARGET attnkit::dnnl)
  set(ATTNKIT_DNNL_FOUND TRUE)
else()
  set(ATTNKIT_DNNL_FOUND FALSE)
endif()

if(TARGET attnkit::openblas AND TARGET attnkit::stb)
  set(ATTNKIT_IMPORTED_LIBS_FOUND TRUE)
else()
  set(ATTNKIT_IMPORTED_LIBS_FOUND FALSE)
endif()
