# Agent benchmarks (issue 3): overhead ratio, cost per sample, RSS, controller step response.
# Run: build/bench/bench-agent overhead 7; build/bench/bench-agent step bench/
add_executable(bench-agent bench-agent.c)
target_link_libraries(bench-agent PRIVATE fp_common m)
add_dependencies(bench-agent fp-work fp-work-linked fleetprof_agent)

# Frame-pointer walk vs libunwind's unw_backtrace (why the handler uses frame pointers).
pkg_check_modules(LIBUNWIND IMPORTED_TARGET libunwind)
if(LIBUNWIND_FOUND)
  add_executable(bench-agent-unwind bench-agent-unwind.c)
  target_link_libraries(bench-agent-unwind PRIVATE fp_agent_core)
  target_compile_options(bench-agent-unwind PRIVATE -fno-omit-frame-pointer
    -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls)
  target_link_libraries(bench-agent-unwind PRIVATE fp_common PkgConfig::LIBUNWIND Threads::Threads)
endif()

# Issue 14: the CFI row lookup on a cold cache, plain binary search vs the bucket index, and
# the index's memory and cache lines per bucket size. Run: build/bench/bench-cfi-index
add_executable(bench-cfi-index bench-cfi-index.c)
target_link_libraries(bench-cfi-index PRIVATE fp_agent_core)

# Handler cost per sample, in-process (delivery measured separately with a null handler).
add_executable(bench-agent-handler bench-agent-handler.c)
target_compile_options(bench-agent-handler PRIVATE -fno-omit-frame-pointer -fno-optimize-sibling-calls)
target_link_libraries(bench-agent-handler PRIVATE fleetprof_agent Threads::Threads)
set_target_properties(bench-agent-handler PROPERTIES LINK_FLAGS "-Wl,--no-as-needed")

# Issue 14: the agent's CPU stacks as text, for cfi-vs-perf.py (comparison with perf).
add_executable(dump-stacks dump-stacks.c)
target_link_libraries(dump-stacks PRIVATE fp_common)
# Fork/exec cost (issue 13): posix_spawn of /bin/true with and without the agent preloaded,
# collector up / down / stopped / none, as one interleaved run. Run: build/bench/bench-spawn
add_executable(bench-spawn bench-spawn.c)
target_link_libraries(bench-spawn PRIVATE Threads::Threads)
add_dependencies(bench-spawn fleetprof_agent)
# A profiled program that forks: build/bench/bench-spawn --prog build/bench/fork-loop
add_executable(fork-loop fork-loop.c)

# Issue 31: begin/end of a request's span on the hot path (ns per pair, vs set/clear and two
# clock reads). Run: FLEETPROF_OUTPUT=/tmp/x build/bench/bench-agent-spans
add_executable(bench-agent-spans bench-agent-spans.c)
target_include_directories(bench-agent-spans PRIVATE ${PROJECT_SOURCE_DIR}/agent/include)
target_link_libraries(bench-agent-spans PRIVATE fleetprof_agent)
set_target_properties(bench-agent-spans PROPERTIES LINK_FLAGS "-Wl,--no-as-needed")
