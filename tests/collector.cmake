# Collector tests (issue 5). Kafka brokers use ports 19400-19449, HTTP ports 19450-19499.
set(COL_TEST_LIBS fp_collector PkgConfig::RDKAFKA)
fp_test(test-collector LABELS collector LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-kafka LABELS "collector;kafka" LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-outage LABELS "collector;kafka;slow" LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-agent LABELS "collector;kafka;e2e;overlaps" LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
foreach(t test-collector test-collector-kafka test-collector-outage test-collector-agent)
  add_dependencies(${t} fleetprof-collector)
endforeach()
# The end-to-end test runs the real agent: `fleetprof run` + libfleetprof.so + fp-work (or
# fp-work-linked under sanitizers). It fails with "agent not built" when they are missing.
foreach(dep fleetprof fleetprof_agent fp-work fp-work-linked)
  if(TARGET ${dep})
    add_dependencies(test-collector-agent ${dep})
  endif()
endforeach()
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  target_compile_definitions(test-collector-agent PRIVATE FP_SANITIZED)
endif()
# Issue 13: pipeline faults counted against the agents' chunk files (broker 19985, HTTP 19986):
# real agents -> collector -> Kafka -> aggregator; the stores' totals equal the files' sums.
# nosan: preloads the uninstrumented agent into fp-work. The 30 s broker outage: label long.
# aggregator_sigkill_twice judges a latency (each new instance stores what Kafka held within
# 15 s) and runs alone; collector_sigkill judges exact totals, and the agents' own count of what
# they dropped; its deadlines only catch hangs (agents that run 8 s of wall time done within
# 60 s, two chunks accepted within 30 s): test-pipeline-faults-kill, which may overlap another
# test (`overlaps`).
# The three entries share the broker's and the collector's ports (RESOURCE_LOCK).
fp_test(test-pipeline-faults LABELS "collector;kafka;e2e;slow;nosan" LIBS ${COL_TEST_LIBS} fp_aggtest
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c
  ARGS aggregator_sigkill_twice_store_exact)
add_test(NAME test-pipeline-faults-kill COMMAND test-pipeline-faults collector_sigkill_store_exact)
set_tests_properties(test-pipeline-faults-kill PROPERTIES TIMEOUT 1200
  LABELS "collector;kafka;e2e;slow;nosan;overlaps"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
add_test(NAME test-pipeline-faults-long
  COMMAND test-pipeline-faults broker_stopped_30s_store_exact)
set_tests_properties(test-pipeline-faults-long PROPERTIES TIMEOUT 1200
  LABELS "collector;kafka;e2e;slow;long;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
set_tests_properties(test-pipeline-faults test-pipeline-faults-kill test-pipeline-faults-long
  PROPERTIES RESOURCE_LOCK fp-kafka-19985)
add_dependencies(test-pipeline-faults fleetprof-collector fleetprof-aggregator fleetprof
  fleetprof_agent fp-work)
