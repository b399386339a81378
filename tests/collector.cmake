# Collector tests (issue 5). Kafka brokers use ports 19400-19449, HTTP ports 19450-19499.
set(COL_TEST_LIBS fp_collector PkgConfig::RDKAFKA)
fp_test(test-collector LABELS collector LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-kafka LABELS "collector;kafka" LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-outage LABELS "collector;kafka;slow" LIBS ${COL_TEST_LIBS}
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
fp_test(test-collector-agent LABELS "collector;kafka;e2e" LIBS ${COL_TEST_LIBS}
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
