# Agent benchmarks (issue 3): overhead ratio, cost per sample, RSS, controller step response.
# Run: build/bench/bench-agent overhead 7; build/bench/bench-agent step bench/
add_executable(bench-agent bench-agent.c)
target_link_libraries(bench-agent PRIVATE fp_common m)
add_dependencies(bench-agent fp-work fp-work-linked fleetprof_agent)
