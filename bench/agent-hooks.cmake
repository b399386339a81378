# Hook overhead (issue 4): ns added to malloc+free, uncontended mutex lock+unlock and a 1-byte
# pipe read, against a baseline without the agent in the same interleaved invocation.
# Run: build/bench/bench-agent-hooks 9   (results: bench/RESULTS.md)
add_executable(bench-agent-hooks bench-agent-hooks.c)
target_link_libraries(bench-agent-hooks PRIVATE Threads::Threads)
add_dependencies(bench-agent-hooks fleetprof_agent)
