# deploy/package/install.cmake: hora as an installed library and a Debian
# package (deploy/package/README.md), included once from the top-level
# CMakeLists.txt after libhora's targets exist.
#
#   cmake --install build [--prefix DIR]   headers, libraries, `hora`, hora.pc,
#                                          the CMake package
#   cd build && cpack -G DEB               hora_VERSION_ARCH.deb
#
# ABI: libhora.so.MAJOR (SOVERSION = the project's major version) exports
# only the HORA_API functions of the public headers, under the version node
# of libhora.map. The major version is bumped by any change that breaks
# programs built against the previous release (a removed or changed
# function, a changed public struct or enum); additions bump the minor.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HORA_MAP ${CMAKE_CURRENT_LIST_DIR}/libhora.map)
set_target_properties(hora_shared PROPERTIES EXPORT_NAME hora LINK_DEPENDS ${HORA_MAP})
set_target_properties(hora_static PROPERTIES EXPORT_NAME hora_static)
target_link_options(hora_shared PRIVATE "LINKER:--version-script=${HORA_MAP}")
if(NOT HORA_SANITIZE AND NOT HORA_TSAN AND NOT HORA_FUZZ)
  # every symbol resolved at link time: libhora.so names all it needs
  # (sanitizer runtimes are the executable's, so not with them)
  target_link_options(hora_shared PRIVATE "LINKER:--no-undefined")
endif()

# ---- files ---------------------------------------------------------------
# Headers under include/hora/: #include <hora/hora.h>, <hora/hora_model.h>,
# <hora/hora_config.h> (the build's features). Nothing else is public.
install(FILES core/hora.h model/hora_model.h ${CMAKE_BINARY_DIR}/generated/hora_config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hora)
install(TARGETS hora_shared EXPORT hora-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hora_static EXPORT hora-static-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hora RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- CMake package: find_package(hora CONFIG) -> hora::hora, hora::hora_static
set(HORA_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hora)
install(EXPORT hora-targets NAMESPACE hora:: FILE hora-targets.cmake
        DESTINATION ${HORA_CMAKEDIR})
install(EXPORT hora-static-targets NAMESPACE hora:: FILE hora-static-targets.cmake
        DESTINATION ${HORA_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hora-config.cmake.in
  ${CMAKE_BINARY_DIR}/package/hora-config.cmake INSTALL_DESTINATION ${HORA_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/hora-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/hora-config.cmake
        ${CMAKE_BINARY_DIR}/package/hora-config-version.cmake DESTINATION ${HORA_CMAKEDIR})

# ---- pkg-config: hora.pc, written at install time for the prefix installed
# to (cmake --install --prefix DIR, or cpack's /usr)
install(CODE "
  set(HORA_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  foreach(_d LIBDIR:${CMAKE_INSTALL_LIBDIR} INCLUDEDIR:${CMAKE_INSTALL_INCLUDEDIR})
    string(REPLACE \":\" \";\" _d \"\${_d}\")
    list(GET _d 0 _k)
    list(GET _d 1 _v)
    if(IS_ABSOLUTE \"\${_v}\")
      set(HORA_PC_\${_k} \"\${_v}\")
    else()
      set(HORA_PC_\${_k} \"\\\${prefix}/\${_v}\")
    endif()
  endforeach()
  set(PROJECT_VERSION ${PROJECT_VERSION})
  configure_file(${CMAKE_CURRENT_LIST_DIR}/hora.pc.in ${CMAKE_BINARY_DIR}/package/hora.pc @ONLY)
")
install(FILES ${CMAKE_BINARY_DIR}/package/hora.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- Debian package: cpack -G DEB ----------------------------------------
# One package, hora: the library, its headers, hora.pc, the CMake package,
# the `hora` command, and libhora_gpu.so when built (loaded on demand; it
# needs NVIDIA's CUDA runtime, cuBLAS and NCCL, not Debian packages, so they
# are suggested, not required). Depends is written out rather than computed
# by dpkg-shlibdeps (which cannot place the CUDA libraries); it is what
# dpkg-shlibdeps gives for libhora.so and `hora` on Debian 12, which
# tests/install/test_install.sh checks against the built package.
set(CPACK_PACKAGE_NAME hora)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "peer-to-peer distributed trainer (library, headers, command)")
set(CPACK_PACKAGE_CONTACT "hora maintainers <hora@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
  "libc6 (>= 2.34), liburing2 (>= 2.3), libyaml-0-2, zlib1g (>= 1:1.2.6), libopenblas0, libsodium23 (>= 0.6.0)")
# a static link (libhora.a, hora::hora_static, pkg-config --static) needs
# the dependencies' development files
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
  "liburing-dev, libyaml-dev, zlib1g-dev, libopenblas-dev, libsodium-dev, pkg-config, libnccl2")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
include(CPack)

# ---- `hora --version` names the Python binding's install directory --------
# The binding's CMake (core/python/) says where its package goes with
#   set_property(GLOBAL PROPERTY HORA_PYTHON_INSTALL_DIR <dir of the package>)
# (absolute, or relative to the install prefix); read once every directory
# has been processed, whatever the order of the add_subdirectory calls.
function(hora_python_feature)
  get_property(dir GLOBAL PROPERTY HORA_PYTHON_INSTALL_DIR)
  if(dir)
    if(NOT IS_ABSOLUTE "${dir}")
      set(dir "${CMAKE_INSTALL_PREFIX}/${dir}")
    endif()
    target_compile_definitions(hora PRIVATE HORA_PYTHON_DIR="${dir}")
  endif()
  get_property(bdir GLOBAL PROPERTY HORA_PYTHON_BUILD_DIR)
  if(bdir)
    target_compile_definitions(hora PRIVATE HORA_PYTHON_BUILD_DIR="${bdir}")
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL hora_python_feature)
