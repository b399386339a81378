# Query API, CLI query commands and whole-pipeline tests (Kafka ports 19600-19699:
# test-api 19600, test-cli-query 19610, test-pipeline 19620, test-capture 19630). They speak
# HTTP with the CLI's libcurl client (cli/src/client.c).
pkg_check_modules(API_CURL REQUIRED IMPORTED_TARGET libcurl)
fp_test(test-api LABELS "api;kafka" LIBS fp_aggtest PkgConfig::API_CURL PkgConfig::JANSSON Threads::Threads
        SOURCES ../cli/src/client.c support/served.c)
add_dependencies(test-api fleetprof-aggregator)
fp_test(test-cli-query LABELS "api;cli;kafka" LIBS fp_aggtest PkgConfig::JANSSON
        SOURCES support/served.c)
add_dependencies(test-cli-query fleetprof-aggregator fleetprof)
# The whole pipeline: demo-service under `fleetprof run` -> collector -> Kafka -> aggregator ->
# CLI / go tool pprof (about 2 minutes). nosan: it preloads the agent into uninstrumented code.
if(TARGET fp_collector)
  fp_test(test-pipeline LABELS "api;pipeline;slow;nosan;kafka"
          LIBS fp_aggtest fp_collector PkgConfig::RDKAFKA PkgConfig::JANSSON m
          SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c support/pipeline.c)
  set_tests_properties(test-pipeline PROPERTIES FIXTURES_REQUIRED go-pprof)
  # `fleetprof capture` through the aggregator, Kafka's control topic and the collector, and
  # straight to the collector (Kafka ports 19630-19633; about a minute). It counts manual
  # incidents (the trigger's name) and the collector's counters, and its waits only catch a
  # capture that never arrives (listed within 40 s: 5 s in a CI run): `overlaps`.
  fp_test(test-capture LABELS "api;pipeline;collector;kafka;nosan;overlaps"
          LIBS fp_aggtest fp_collector PkgConfig::RDKAFKA PkgConfig::JANSSON Threads::Threads
          SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test-collector-client.c support/pipeline.c)
  foreach(dep fleetprof-aggregator fleetprof-collector fleetprof fleetprof_agent demo-service)
    if(TARGET ${dep})
      add_dependencies(test-pipeline ${dep})
      add_dependencies(test-capture ${dep})
    endif()
  endforeach()
endif()
# The HTTP server's guards (Host allow-list, idle-connection admission, header deadline,
# bounded patterns, --api-token-file): in-process servers and the binary without Kafka.
fp_test(test-http LABELS "api" LIBS fp_aggtest PkgConfig::API_CURL)
add_dependencies(test-http fleetprof-aggregator)
# The web UI served by the aggregator (static assets, gzip, ETag, token and cookie).
fp_test(test-ui LABELS "api;ui" LIBS fp_aggtest PkgConfig::API_CURL)
# The web UI in headless chromium against a real pipeline fed by the demo service (about 90 s;
# Kafka ports 19840-19842). nosan: it preloads the agent into uninstrumented code and tests
# JavaScript; slow: excluded from the sanitizer runs.
add_test(NAME test-ui-browser COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ui/browser-test.sh)
set_tests_properties(test-ui-browser PROPERTIES TIMEOUT 400 LABELS "ui;browser;pipeline;slow;nosan;kafka"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# The flame graph's search in linear time: patterns that freeze the browser's RegExp answered
# within 100 ms over 2,000 names, ordinary ones as RegExp answers them (node, no browser).
add_test(NAME test-ui-search COMMAND node ${CMAKE_CURRENT_SOURCE_DIR}/ui/search-test.mjs)
set_tests_properties(test-ui-search PROPERTIES TIMEOUT 120 LABELS "ui;nosan")
# ui/dist (committed, embedded) is what ui/src builds to (node + ui/node_modules: npm ci when
# missing). nosan: JavaScript only, nothing for a sanitizer to see.
add_test(NAME test-ui-dist COMMAND ${PROJECT_SOURCE_DIR}/ui/build.sh --check)
set_tests_properties(test-ui-dist PROPERTIES TIMEOUT 300 LABELS "ui;nosan")

# Endpoints and requests end to end without Kafka: the demo under the agent, its chunk files
# loaded into a SQLite store, the query store's endpoints / stuck requests (issue 31).
fp_test(test-endpoints LABELS "api;query;nosan" LIBS fp_aggtest PkgConfig::JANSSON m
        ARGS demo_endpoints)
add_dependencies(test-endpoints fleetprof_agent demo-service fleetprof)
# Per-endpoint diff of two versions run side by side, and the endpoint filter on every profile
# route (the demo's v2 changes one endpoint).
add_test(NAME test-endpoints-diff COMMAND test-endpoints endpoint_diff)
set_tests_properties(test-endpoints-diff PROPERTIES TIMEOUT 300 LABELS "api;query;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# A real tracer in the loop: the OpenTelemetry SDK (PyPI, venv under ~/.cache/fleetprof made
# by deploy/otel-venv.sh; the first run downloads it) exports the ids fleetprof records.
add_test(NAME test-endpoints-otel COMMAND test-endpoints otel_ids)
set_tests_properties(test-endpoints-otel PROPERTIES TIMEOUT 300 LABELS "otel;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# The incidents page, an incident's page and the timeline's incident markers (issue 32) in
# headless chromium, on a store test-agent-incident makes (fixed port 19845).
add_test(NAME test-ui-incidents COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ui/incidents-browser-test.sh)
set_tests_properties(test-ui-incidents PROPERTIES TIMEOUT 300 LABELS "ui;browser;incident;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
# Flame-graph frames coloured by kind of code (JavaScript from node's perf map, native) in
# headless chromium, on a store test-agent-node makes (fixed port 19846).
add_test(NAME test-ui-kinds COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ui/kinds-browser-test.sh)
set_tests_properties(test-ui-kinds PROPERTIES TIMEOUT 300 LABELS "ui;browser;nosan"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
