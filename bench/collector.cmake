# Collector benchmark (issue 5): agents -> fleetprof-collector -> real Kafka on loopback.
add_executable(bench-collector bench-collector.c ${PROJECT_SOURCE_DIR}/tests/test-collector-client.c)
target_include_directories(bench-collector PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(bench-collector PRIVATE fp_testsupport PkgConfig::RDKAFKA Threads::Threads)
add_dependencies(bench-collector fleetprof-collector)
