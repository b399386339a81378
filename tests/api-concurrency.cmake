# Concurrent queries (issue 17): the query worker pool, 503 when saturated, and 32 clients
# during ingest. Kafka port 19880 (range 19880-19899 is issue 17's), HTTP 19881: the two entries
# share them, hence the resource lock. The load case (~50 s, ~3 min under TSan) is `slow`.
fp_test(test-api-concurrency LABELS "api;kafka" LIBS fp_aggtest Threads::Threads
        ARGS pool_bounds saturated_503)
add_dependencies(test-api-concurrency fleetprof-aggregator)
add_test(NAME test-api-concurrency-load COMMAND test-api-concurrency concurrent_clients_during_ingest)
set_tests_properties(test-api-concurrency-load PROPERTIES TIMEOUT 1200 LABELS "api;kafka;slow"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
set_tests_properties(test-api-concurrency test-api-concurrency-load PROPERTIES
  RESOURCE_LOCK kafka-19880)
