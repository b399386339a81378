# Aggregator tests: store and retention without Kafka, then end to end with a real broker
# (test-aggregator: port 19510; test-aggregator-chaos: SIGKILLs and rebalances, port 19520).
# TSan: librdkafka's C11 threads must be created through pthread_create (tsan_threads.c).
set(agg_shim "")
if(FLEETPROF_SANITIZE STREQUAL "thread")
  set(agg_shim ${PROJECT_SOURCE_DIR}/aggregator/src/tsan_threads.c)
endif()
fp_test(test-aggregator LABELS "aggregator;kafka" LIBS fp_aggtest SOURCES ${agg_shim})
fp_test(test-aggregator-chaos LABELS "aggregator;kafka" LIBS fp_aggtest SOURCES ${agg_shim})
add_dependencies(test-aggregator fleetprof-aggregator)
add_dependencies(test-aggregator-chaos fleetprof-aggregator)
