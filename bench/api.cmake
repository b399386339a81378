# The query API's benchmark (bench-api.c): HTTP latency of merged profiles and diffs over one
# hour of a service with 10,000 stacks from 100 processes. Results: bench/RESULTS.md.
if(TARGET fp_aggregator)
  pkg_check_modules(BENCH_API_CURL REQUIRED IMPORTED_TARGET libcurl)
  add_executable(bench-api bench-api.c ${PROJECT_SOURCE_DIR}/cli/src/client.c)
  target_link_libraries(bench-api PRIVATE fp_aggregator PkgConfig::BENCH_API_CURL m)
endif()
