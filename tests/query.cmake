# The aggregator's query layer (aggregator/query: fp_query).
if(TARGET fp_query)
  fp_test(test-query LABELS query LIBS fp_query)
endif()
if(TARGET fp_query)
  fp_test(test-query-diff LABELS query LIBS fp_query m)
endif()
if(TARGET fp_query)
  fp_test(test-query-pprof LABELS "query;pprof" LIBS fp_query m)
  set_tests_properties(test-query-pprof PROPERTIES FIXTURES_REQUIRED go-pprof)
endif()
if(TARGET fp_query)
  fp_test(test-query-insights LABELS query LIBS fp_query m)
endif()
# Insight rules on real programs under the agent (issue 33): each insight_work mode raises its
# one insight with the planted site first; the demo service, fp-work and a mixed workload none;
# KPMs against the programs' truth, search, deploy reports; the CLI against an aggregator on
# HTTP port 19897 (no broker). About 2.5 min on a quiet 2-core machine.
enable_language(CXX)
add_executable(insight_work programs/insight_work.cc)
target_compile_options(insight_work PRIVATE -O1 -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls)
target_link_libraries(insight_work PRIVATE Threads::Threads)
if(TARGET fp_query)
  # The leak case (50 s of wall time, mostly asleep: insight_work keeps its blocks at wall-clock
  # rates whatever the load does to its loop, and the rule judges in-use growth per second)
  # is test-insights-leak, which may overlap another test (`overlaps`); so is search_spike
  # (30 s, mostly asleep too: test-insights-spike), whose spike_site allocates its 64 MiB per
  # second of wall time whatever the load (a late loop catches up) while the steady site's
  # rate can only drop when the loop is late, and whose figures are allocated bytes (sampled
  # by bytes, not by CPU time; in a CI run the spike's bucket was 3x the baseline and
  # spike_site 100 % of its bytes, asked for: above it and > 50 %). The share, null, KPM and
  # report cases run alone.
  fp_test(test-insights LABELS "query;agent;nosan" LIBS fp_aggtest m ARGS -leak -search_spike)
  add_dependencies(test-insights insight_work fp-work demo-service fleetprof_agent
                   fleetprof-aggregator fleetprof)
  add_test(NAME test-insights-leak COMMAND test-insights leak)
  add_test(NAME test-insights-spike COMMAND test-insights search_spike)
  set_tests_properties(test-insights-leak test-insights-spike PROPERTIES TIMEOUT 1200
    LABELS "query;agent;nosan;overlaps"
    ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
endif()
