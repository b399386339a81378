# The aggregator's symbolizer (issue 15): cost per chunk of naming unnamed frames through
# debuginfod, off / cold / warm (bench/symbols-server.sh starts the debuginfod it needs).
add_executable(bench-symbolizer bench-symbolizer.c)
target_link_libraries(bench-symbolizer PRIVATE fp_aggregator)
