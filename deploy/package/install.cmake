# Install rules and the Debian package (CPack DEB). Included from the top-level CMakeLists.txt
# after every target exists.
#
#   cmake --install build --prefix /opt/x   binaries, libfleetprof.so, fleetprof.h, fleetprof.pc,
#                                            systemd units, sysusers/tmpfiles snippets, example
#                                            configs (etc/fleetprof/*.conf under the prefix, or
#                                            /etc/fleetprof when the prefix is /usr)
#   (cd build && cpack -G DEB)               fleetprof_<version>_<arch>.deb, /usr prefix
#
# Paths follow GNUInstallDirs; the units, the sysusers and tmpfiles snippets go under
# <prefix>/lib (systemd's vendor directories: /usr/lib/systemd/system etc. on a /usr prefix).
include(GNUInstallDirs)

set(FP_PKG ${PROJECT_SOURCE_DIR}/deploy/package)

install(TARGETS fleetprof-collector fleetprof-aggregator fleetprof
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS fleetprof_agent
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# fleetprof run looks for the agent in <bindir>/../<libdir> too.
target_compile_definitions(fleetprof PRIVATE FLEETPROF_INSTALL_LIBDIR="${CMAKE_INSTALL_LIBDIR}")
install(FILES ${PROJECT_SOURCE_DIR}/agent/include/fleetprof.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
configure_file(${FP_PKG}/fleetprof.pc.in ${PROJECT_BINARY_DIR}/fleetprof.pc @ONLY)
# The .pc file names the prefix it was configured with; the install rewrites it for the prefix
# actually used (cmake --install --prefix, CPack's /usr).
install(CODE "
  file(READ \"${PROJECT_BINARY_DIR}/fleetprof.pc\" _pc)
  string(REGEX REPLACE \"^prefix=[^\\n]*\" \"prefix=\${CMAKE_INSTALL_PREFIX}\" _pc \"\${_pc}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/pc-install/fleetprof.pc\" \"\${_pc}\")
  file(INSTALL \"${PROJECT_BINARY_DIR}/pc-install/fleetprof.pc\"
       DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")")

install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/fleetprof-collector.service
              ${PROJECT_SOURCE_DIR}/deploy/systemd/fleetprof-aggregator.service
        DESTINATION lib/systemd/system)
install(FILES ${FP_PKG}/sysusers.conf DESTINATION lib/sysusers.d RENAME fleetprof.conf)
install(FILES ${FP_PKG}/tmpfiles.conf DESTINATION lib/tmpfiles.d RENAME fleetprof.conf)

# Example configs: documentation copies, and the live files the units read. /usr is the one
# prefix whose configuration lives outside it (/etc), as GNUInstallDirs has it.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/collector.conf.example
              ${PROJECT_SOURCE_DIR}/deploy/aggregator.conf.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/collector/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME README.collector.md)
install(FILES ${PROJECT_SOURCE_DIR}/aggregator/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME README.aggregator.md)
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(_etc \"/etc/fleetprof\")
  else()
    set(_etc \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}/fleetprof\")
  endif()
  file(MAKE_DIRECTORY \"${PROJECT_BINARY_DIR}/conf-install\")
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/collector.conf.example\"
                 \"${PROJECT_BINARY_DIR}/conf-install/collector.conf\" COPYONLY)
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/aggregator.conf.example\"
                 \"${PROJECT_BINARY_DIR}/conf-install/aggregator.conf\" COPYONLY)
  file(INSTALL \"${PROJECT_BINARY_DIR}/conf-install/collector.conf\"
               \"${PROJECT_BINARY_DIR}/conf-install/aggregator.conf\"
       DESTINATION \"\${_etc}\" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)")

# Debian package. Debian wants a copyright file and a gzipped changelog in the doc directory.
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/debian-doc)
execute_process(COMMAND sh -c "printf 'fleetprof (${PROJECT_VERSION}) unstable; urgency=medium\\n\\n  * Release ${PROJECT_VERSION}.\\n\\n -- fleetprof maintainers <fleetprof@example.org>  Wed, 25 Nov 2026 00:00:00 +0000\\n' | gzip -9n > '${PROJECT_BINARY_DIR}/debian-doc/changelog.gz'")
install(FILES ${FP_PKG}/copyright ${PROJECT_BINARY_DIR}/debian-doc/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Manual pages of the three programs (deploy/package/man/*.in: the version filled in), gzipped
# as Debian wants them (lintian's no-manual-page and manual-page-not-compressed).
foreach(page fleetprof.1 fleetprof-collector.8 fleetprof-aggregator.8)
  configure_file(${FP_PKG}/man/${page}.in ${PROJECT_BINARY_DIR}/man/${page} @ONLY)
  execute_process(COMMAND sh -c "gzip -9n < '${PROJECT_BINARY_DIR}/man/${page}' > '${PROJECT_BINARY_DIR}/man/${page}.gz'")
  string(REGEX MATCH "[0-9]$" section ${page})
  install(FILES ${PROJECT_BINARY_DIR}/man/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fleetprof)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Installed with DESTDIR=<staging> and prefix /usr, so /etc/fleetprof lands in the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "fleetprof maintainers <fleetprof@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "continuous profiler for native Linux services")
set(CPACK_PACKAGE_DESCRIPTION "fleetprof samples CPU and wall-clock time, allocations, lock waits
and slow I/O inside C, C++ and Rust services (libfleetprof.so, LD_PRELOAD),
ships the samples through a per-node collector and Kafka to an aggregator
that rolls them up per service, version and time, and answers queries
(fleetprof top, diff, span) over an HTTP API.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${FP_PKG}/postinst ${FP_PKG}/postrm ${FP_PKG}/conffiles
    ${FP_PKG}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
