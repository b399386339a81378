# PostgreSQL backend of the aggregator's store (issue 17). Tests start throwaway clusters with
# deploy/postgres/start.sh on loopback ports 15432-15443 (test-postgres-scripts: 15432 and 15441,
# test-store-pg: 15433 or FP_PG_TEST_PORT, test-aggregator-pg: 15434, test-query-backends: 15436,
# test-api-pg and test-cli-query-pg: 15437, one at a time; test-aggregator-pg-ro: 15442).
add_test(NAME test-postgres-scripts COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/postgres-scripts.sh)
set_tests_properties(test-postgres-scripts PROPERTIES TIMEOUT 180 LABELS "postgres;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR}")
fp_test(test-store-pg LABELS "postgres;aggregator" LIBS fp_aggtest)
# Exactly once on PostgreSQL with a real broker (Kafka 19882, PostgreSQL 15434): three
# instances with their own working dirs, SIGKILLs, a database crash and an outage, exact
# totals; then SIGTERM during an outage (exit in seconds, nothing lost) and store_bytes.
# FP_PG_CHAOS_LONG=1 runs the issue's full acceptance (10 kills, a 30 s outage).
fp_test(test-aggregator-pg LABELS "postgres;aggregator;kafka;slow" LIBS fp_aggtest)
add_dependencies(test-aggregator-pg fleetprof-aggregator)
# The query API over SQLite and over PostgreSQL (port 15436): the same fleet, every route the UI
# and CLI use, byte-identical answers.
fp_test(test-query-backends LABELS "postgres;query;api" LIBS fp_aggtest)
# The query API suite on the PostgreSQL backend: the same test-api assertions with the
# aggregator started with --store postgres://... (PostgreSQL 15437, Kafka 19940-19941). slow:
# not under the sanitizers (test-api covers the API code there, test-query-backends the
# PostgreSQL reads).
add_test(NAME test-api-pg COMMAND test-api)
set_tests_properties(test-api-pg PROPERTIES TIMEOUT 1200 LABELS "postgres;api;kafka;slow"
  RESOURCE_LOCK fp-pg-15437
  ENVIRONMENT "FP_TEST_STORE=postgres;FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# The CLI's query commands on the PostgreSQL backend (PostgreSQL 15437 too: one at a time with
# test-api-pg; Kafka 19942-19943).
add_test(NAME test-cli-query-pg COMMAND test-cli-query)
set_tests_properties(test-cli-query-pg PROPERTIES TIMEOUT 1200
  LABELS "postgres;api;cli;kafka;slow" RESOURCE_LOCK fp-pg-15437
  ENVIRONMENT "FP_TEST_STORE=postgres;FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# Issue 13's "store read-only for 20 s" on PostgreSQL (Kafka 19980, HTTP 19981, PostgreSQL
# 15442): default_transaction_read_only on for 20 s while the fleet produces; the aggregator
# survives, /healthz 503 then 200, ingest resumes, totals exact. ~60 s.
fp_test(test-aggregator-pg-ro LABELS "postgres;aggregator;kafka;slow" LIBS fp_aggtest)
add_dependencies(test-aggregator-pg-ro fleetprof-aggregator)
