# `cmake --install BUILD --prefix P` rules: headers in P/include, libattnkit.a in P/LIBDIR, the CMake
# package (find_package(attnkit) → attnkit::attnkit) in P/LIBDIR/cmake/attnkit and the pkg-config
# file P/LIBDIR/pkgconfig/attnkit.pc. Every installed file locates P relative to itself, so P can
# be moved or copied. LIBDIR is GNUInstallDirs' (lib, or lib/<multiarch> under /usr).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNKIT_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/attnkit")

install(TARGETS attnkit EXPORT attnkitTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY include/ DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT attnkitTargets NAMESPACE attnkit:: DESTINATION "${ATTNKIT_CMAKE_DIR}")

configure_package_config_file(cmake/attnkitConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/attnkitConfig.cmake"
  INSTALL_DESTINATION "${ATTNKIT_CMAKE_DIR}" NO_SET_AND_CHECK_MACRO)
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/attnkitConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/attnkitConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/attnkitConfigVersion.cmake"
  cmake/attnkit_imported_libs.cmake DESTINATION "${ATTNKIT_CMAKE_DIR}")

set(ATTNKIT_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH ATTNKIT_PC_TO_PREFIX "/prefix/${ATTNKIT_PC_DIR}" "/prefix")
set(ATTNKIT_PC_DNNL "")
if(ATTNKIT_HAVE_DNNL)
  set(ATTNKIT_PC_DNNL "-ldnnl ")
endif()
configure_file(cmake/attnkit.pc.in "${CMAKE_CURRENT_BINARY_DIR}/attnkit.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/attnkit.pc" DESTINATION "${ATTNKIT_PC_DIR}")
