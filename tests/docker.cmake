# Issue 18: the container images (deploy/docker), built with podman from a debootstrap'd Debian
# base (no registry reachable here). Several minutes (the build stage compiles the project on a
# fresh Debian), so opt-in: -DFLEETPROF_CONTAINER_TESTS=ON (needs podman and debootstrap, root).
option(FLEETPROF_CONTAINER_TESTS "Build and run the container images in a test (podman)" OFF)
if(FLEETPROF_CONTAINER_TESTS)
  find_program(PODMAN podman REQUIRED)
  find_program(DEBOOTSTRAP debootstrap PATHS /usr/sbin REQUIRED)
  add_test(NAME test-docker
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/docker/test-docker.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  set_tests_properties(test-docker PROPERTIES LABELS "container;slow;nosan" TIMEOUT 3600)
endif()
