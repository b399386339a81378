# Issue 18 item 5: dimensions (host, node, pod, container, pid, I/O target, fd kind, lock) as
# bounded labels. test-dims-bound: the bound and the stored split, no Kafka. test-dims: end to
# end with a real broker (Kafka 19900, HTTP 19901-19903), the fleet simulator on two hosts and
# io_work under the agent through the collector. nosan: it preloads the agent into an
# uninstrumented program; fleet: it compares the agent's I/O times with the program's own, so
# it runs alone (tests/CMakeLists.txt).
fp_test(test-dims-bound LABELS "aggregator" LIBS fp_aggregator)
fp_test(test-dims LABELS "aggregator;api;fleet;kafka;nosan" LIBS fp_aggtest PkgConfig::API_CURL
        PkgConfig::JANSSON PkgConfig::RDKAFKA m
        SOURCES ../cli/src/client.c ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
add_dependencies(test-dims fleetprof-aggregator fleetprof-collector fleetprof fleetprof_agent
  io_work)
