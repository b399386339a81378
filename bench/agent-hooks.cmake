# Hook overhead (issue 4): ns added to malloc+free, uncontended mutex lock+unlock and a 1-byte
# pipe read, against a baseline without the agent in the same interleaved invocation.
# Run: build/bench/bench-agent-hooks 9   (results: bench/RESULTS.md)
add_executable(bench-agent-hooks bench-agent-hooks.c)
target_link_libraries(bench-agent-hooks PRIVATE Threads::Threads)
add_dependencies(bench-agent-hooks fleetprof_agent)

# End-to-end overhead on a mixed service-like workload (CPU + allocations + contended and
# uncontended locks + pipe/socket I/O): agent at default settings vs none, interleaved rounds
# (or "pair": base and agent at once, one core each; "pairsame": at once on one core). Run:
# build/bench/bench-agent-mixed 61 30000; build/bench/bench-agent-mixed pairsame 41 30000;
# build/bench/bench-agent-mixed pair 41 30000   (results: bench/RESULTS.md)
add_executable(bench-agent-mixed bench-agent-mixed.c)
target_compile_options(bench-agent-mixed PRIVATE -fno-omit-frame-pointer)
target_link_libraries(bench-agent-mixed PRIVATE Threads::Threads m)
add_dependencies(bench-agent-mixed fleetprof_agent)
