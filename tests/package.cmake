# Install and packaging: cmake --install, the CPack .deb (lintian, dpkg-deb), the systemd units
# (systemd-analyze verify/security). Needs the binaries, so it depends on nothing but the build.
add_test(NAME test-package
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/package/test-package.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test-package PROPERTIES LABELS "package;nosan" TIMEOUT 300)
