# Aggregator benchmarks (real Kafka broker on port 19530): ingest throughput on one core, store
# bytes per sample, consumer lag under a steady simulated fleet of 1,000 processes.
add_executable(bench-aggregator bench-aggregator.c)
target_link_libraries(bench-aggregator PRIVATE fp_aggtest)
add_dependencies(bench-aggregator fleetprof-aggregator)
target_compile_definitions(bench-aggregator PRIVATE PROJECT_SRC="${PROJECT_SOURCE_DIR}")
# Storage cost of the dimensions (issue 18): the same fleet into two stores, without and with
# them, through the aggregator's own rollup and store code (no Kafka).
add_executable(bench-dims bench-dims.c)
target_link_libraries(bench-dims PRIVATE fp_aggregator fp_fleetsim)
