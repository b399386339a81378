# PostgreSQL backend of the aggregator's store (issue 17). Tests start throwaway clusters with
# deploy/postgres/start.sh on loopback ports 15432-15439 (test-postgres-scripts: 15432,
# test-store-pg: 15433).
add_test(NAME test-postgres-scripts COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/postgres-scripts.sh)
set_tests_properties(test-postgres-scripts PROPERTIES TIMEOUT 180 LABELS "postgres;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR}")
fp_test(test-store-pg LABELS "postgres;aggregator" LIBS fp_aggtest)
