# Aggregator benchmarks (real Kafka broker on port 19530): ingest throughput on one core, store
# bytes per sample, consumer lag under a steady simulated fleet of 1,000 processes.
add_executable(bench-aggregator bench-aggregator.c)
target_link_libraries(bench-aggregator PRIVATE fp_aggtest)
add_dependencies(bench-aggregator fleetprof-aggregator)
target_compile_definitions(bench-aggregator PRIVATE PROJECT_SRC="${PROJECT_SOURCE_DIR}")
