# PostgreSQL backend of the aggregator's store (issue 17). Tests start throwaway clusters with
# deploy/postgres/start.sh on loopback ports 15432-15439 (test-postgres-scripts: 15432,
# test-store-pg: 15433, test-aggregator-pg: 15434).
add_test(NAME test-postgres-scripts COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/postgres-scripts.sh)
set_tests_properties(test-postgres-scripts PROPERTIES TIMEOUT 180 LABELS "postgres;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR}")
fp_test(test-store-pg LABELS "postgres;aggregator" LIBS fp_aggtest)
# Exactly once on PostgreSQL with a real broker (Kafka 19882, PostgreSQL 15434): three
# instances with their own working dirs, SIGKILLs, a database crash and an outage, exact
# totals. FP_PG_CHAOS_LONG=1 runs the issue's full acceptance (10 kills, a 30 s outage).
fp_test(test-aggregator-pg LABELS "postgres;aggregator;kafka;slow" LIBS fp_aggtest)
add_dependencies(test-aggregator-pg fleetprof-aggregator)
# Issue 13's "store read-only for 20 s" on PostgreSQL (Kafka 19980, HTTP 19981, PostgreSQL
# 15442): default_transaction_read_only on for 20 s while the fleet produces; the aggregator
# survives, /healthz 503 then 200, ingest resumes, totals exact. ~60 s.
fp_test(test-aggregator-pg-ro LABELS "postgres;aggregator;kafka;slow" LIBS fp_aggtest)
add_dependencies(test-aggregator-pg-ro fleetprof-aggregator)
