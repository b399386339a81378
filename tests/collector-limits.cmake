# Issue 28: the collector against other local users (per-uid connection, rate and spool
# limits, idle timeout). No broker. Needs root (a hostile client runs as nobody).
fp_test(test-collector-limits LABELS collector LIBS fp_collector PkgConfig::RDKAFKA
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c)
add_dependencies(test-collector-limits fleetprof-collector fp-work-linked)
