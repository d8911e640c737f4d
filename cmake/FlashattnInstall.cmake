# Install rules: headers, libflashattn.so (+ GPU modules, installed by their own
# CMakeLists next to it), the CMake package flash::flashattn and a pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS flashattn EXPORT flashattnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/flash/flash.hpp include/flash/flash.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flash)

set(FLASHATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
install(EXPORT flashattnTargets NAMESPACE flash:: DESTINATION ${FLASHATTN_CMAKE_DIR})
configure_package_config_file(cmake/flashattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake INSTALL_DESTINATION ${FLASHATTN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
        DESTINATION ${FLASHATTN_CMAKE_DIR})

configure_file(cmake/flashattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
