# Agent tests (issue 3): workload programs under libfleetprof, read back through the codec.
# fp-work: plain program (for LD_PRELOAD and `fleetprof run`); fp-work-linked: linked to the
# agent (sanitizer builds: a sanitized .so cannot be preloaded into an uninstrumented program).
foreach(v fp-work fp-work-linked)
  add_executable(${v} programs/fp-work.c)
  target_compile_options(${v} PRIVATE -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
    -fno-optimize-sibling-calls)
  target_link_libraries(${v} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
endforeach()
target_link_libraries(fp-work-linked PRIVATE fleetprof_agent)
# Linked before libc so that its pthread_create/sigaction interposers are the ones called.
set_target_properties(fp-work-linked PROPERTIES LINK_FLAGS "-Wl,--no-as-needed")

# The cases of test-agent that judge what the agent records, not how much CPU, how fast or at
# what rate: span contexts and labels, the API's checks, fork and exec, signals (SIGTERM at its
# default, _exit, handlers on an alternate stack, chained handlers), flush, deep stacks,
# `fleetprof run`, stat descriptors, the off switch. Their workloads run for an amount of CPU
# time, and their sample counts (CPU-time timers; in a CI run 1.4x what underscore_exit asks
# for, 2.9x for span_context and altstack_handler) do not drop when another test takes a core. They are test-agent-mechanics, which may
# overlap another test (label `overlaps`); test-agent (CPU accuracy, rates, the controller and
# budget, wall time and on-CPU flags, chunk intervals, the collector protocol's timing, named
# spans' durations) runs alone. A case added later runs alone unless listed here.
set(agent_mechanics_cases span_context api_traceparent config_parse fork exec sigterm_flush
  underscore_exit altstack_handler flush_api spans_no_samples signal_chain deep_stack cli_run
  wall_stat_fds disabled)
list(TRANSFORM agent_mechanics_cases PREPEND "-" OUTPUT_VARIABLE agent_serial_args)
fp_test(test-agent LABELS agent LIBS m ARGS ${agent_serial_args})
add_dependencies(test-agent fp-work fp-work-linked fleetprof fleetprof_agent)
add_test(NAME test-agent-mechanics COMMAND test-agent ${agent_mechanics_cases})
set_tests_properties(test-agent-mechanics PROPERTIES TIMEOUT 1200 LABELS "agent;overlaps"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  target_compile_definitions(test-agent PRIVATE FP_SANITIZED)
endif()
if(FLEETPROF_SANITIZE STREQUAL "thread")
  target_compile_definitions(test-agent PRIVATE FP_TSAN)
endif()

# The in-process unit tests of this file (test-cfi, -defer, -privalloc, -mutex, -fdnb,
# -controller, -fmath, -bypass, -pyline, -units, -perfmap) run no profiled program and judge
# no CPU time, rate or latency (their clocks are simulated; the few real-time bounds, in
# -privalloc and -fdnb, already allow for a preempted thread): label `overlaps`, so that
# ctest -j4 runs them beside other tests (tests/CMakeLists.txt), not alone with a core idle.
# The CFI compiler on synthetic CIE/FDE bytes and against readelf on real libraries (issue 14).
fp_test(test-cfi LABELS "agent;overlaps" LIBS fp_agent_core)

# Deferred unwinding (issue 14): stack copies taken before the first tables, unwound later.
fp_test(test-agent-defer LABELS "agent;overlaps" LIBS Threads::Threads fp_agent_core)
target_compile_options(test-agent-defer PRIVATE -fomit-frame-pointer)

# The CFI unwinder on a program without frame pointers (issue 14): a known call graph,
# dlopen/dlclose of code on sampled stacks, code without CFI, a thread scribbling its frames.
# Preloads the agent: sanitizer builds cannot (see fp-work-linked), so it runs in the normal one.
add_executable(cfi_work programs/cfi_work.c)
target_compile_options(cfi_work PRIVATE -O2 -fomit-frame-pointer)
target_link_libraries(cfi_work PRIVATE Threads::Threads ${CMAKE_DL_LIBS} m)
add_library(cfi_lib MODULE programs/cfi_lib.c)
target_compile_options(cfi_lib PRIVATE -O2 -fomit-frame-pointer)
target_link_libraries(cfi_lib PRIVATE m)
set_target_properties(cfi_lib PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
fp_test(test-agent-cfi LABELS "agent;nosan" LIBS m)
add_dependencies(test-agent-cfi cfi_work cfi_lib fleetprof_agent)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-cfi PROPERTIES DISABLED TRUE)
endif()
# ag_alloc.c on its own (issue 13): the agent's private allocator and sort.
fp_test(test-agent-privalloc LABELS "agent;overlaps" LIBS Threads::Threads fp_agent_core)
target_compile_definitions(test-agent-privalloc PRIVATE _GNU_SOURCE)
# mutex_layout.c on its own (issue 13): the check before hook_lock.c reads glibc's fields.
fp_test(test-agent-mutex LABELS "agent;overlaps" LIBS fp_agent_core)
target_compile_definitions(test-agent-mutex PRIVATE _GNU_SOURCE)
target_link_libraries(test-agent-mutex PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
# fdnb.c on its own (issue 14): the non-blocking descriptor cache the I/O hooks consult.
fp_test(test-agent-fdnb LABELS "agent;overlaps" LIBS Threads::Threads m fp_agent_core)
# controller.c on its own: the CPU budget's factors and the CPU controller's period.
# The flight recorder's stream split and its budget (recorder/density.c) too.
fp_test(test-agent-controller LABELS "agent;overlaps" LIBS fp_agent_core)
target_compile_definitions(test-agent-controller PRIVATE _GNU_SOURCE)
target_link_libraries(test-agent-controller PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
# fmath.h (issue 13): the agent's libm-free exp/log family against libm.
fp_test(test-agent-fmath LABELS "agent;overlaps" LIBS m fp_agent_headers)
# Every lost chunk counted on a full FLEETPROF_OUTPUT (issue 13): a real tmpfs, filled, then
# freed (unshare -m: needs root). nosan: the agent is preloaded into fp-work.
fp_test(test-agent-output-full LABELS "agent;nosan")
add_dependencies(test-agent-output-full fp-work fleetprof_agent fleetprof-collector)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-output-full PROPERTIES DISABLED TRUE)
endif()
# bypass.c on its own (issue 14): GOT slots bound to the hooks rewritten to the real function.
add_library(bypass_agent SHARED programs/bypass_agent.c)
add_library(bypass_other SHARED programs/bypass_other.c)
add_library(bypass_now SHARED programs/bypass_user.c)
target_compile_definitions(bypass_now PRIVATE BP_PREFIX=now_)
target_link_options(bypass_now PRIVATE -Wl,-z,now -Wl,-z,relro)
add_library(bypass_lazy SHARED programs/bypass_user.c)
target_compile_definitions(bypass_lazy PRIVATE BP_PREFIX=lazy_)
target_link_options(bypass_lazy PRIVATE -Wl,-z,lazy -Wl,-z,norelro)
target_link_libraries(bypass_now PRIVATE bypass_agent bypass_other)
target_link_libraries(bypass_lazy PRIVATE bypass_agent bypass_other)
fp_test(test-agent-bypass LABELS "agent;overlaps" LIBS fp_agent_core)
target_compile_definitions(test-agent-bypass PRIVATE _GNU_SOURCE)
target_link_libraries(test-agent-bypass PRIVATE bypass_now bypass_lazy bypass_agent bypass_other
  ${CMAKE_DL_LIBS})

# CPython frames (issue 34): Debian's python3 under the agent (tests/python/*.py), its 3.11
# offsets against python3.11-dbg's DWARF, and py-spy's profile of the same run (py-spy from
# PyPI into a venv under ~/.cache/fleetprof). Preloads the agent: plain builds only.
fp_test(test-agent-python LABELS "agent;nosan" LIBS m)
add_dependencies(test-agent-python fleetprof_agent)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-python PROPERTIES DISABLED TRUE)
endif()
# Java frames (JVMTI + AsyncGetCallTrace): OpenJDK 17 under the agent (tests/java/*.java),
# 20 runs of a stress program, and the profiles of JFR and async-profiler 4.1 (Maven Central,
# cached under ~/.cache/fleetprof). Preloads the agent: plain builds only. The stress runs
# (most of the time) judge checksums against a run without the agent and that Java frames were
# sampled (CPU-time timers: a count that no other test's load lowers), no CPU time, rate or
# latency: they are test-agent-java-stress, which may overlap another test (`overlaps`); the
# frames and the comparison with JFR and async-profiler run alone.
fp_test(test-agent-java LABELS "agent;nosan;slow" LIBS m ARGS frames compare)
add_dependencies(test-agent-java fleetprof_agent)
add_test(NAME test-agent-java-stress COMMAND test-agent-java stress)
set_tests_properties(test-agent-java-stress PROPERTIES LABELS "agent;nosan;slow;overlaps"
  ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
set_tests_properties(test-agent-java test-agent-java-stress PROPERTIES TIMEOUT 1800)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-java test-agent-java-stress PROPERTIES DISABLED TRUE)
endif()
# The 3.11 line-table decoder against CPython's co_lines() (issue 34); sanitizer builds too.
fp_test(test-agent-pyline LABELS "agent;overlaps" LIBS fp_agent_core)
# The record ring, the chunk builder and the wall sampler in-process (fp_agent_core).
fp_test(test-agent-units LABELS "agent;overlaps" LIBS Threads::Threads fp_agent_core)

# Incidents (issue 32): the flight recorder and its triggers on incident_svc, linked to the
# agent (a spike, a hang, steady and uniformly higher load, a manual capture). Each case runs
# the program for 12-45 s of wall time, so each is its own ctest entry (run in parallel).
add_executable(incident_svc programs/incident_svc.c)
target_compile_options(incident_svc PRIVATE -O1 -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls)
target_link_libraries(incident_svc PRIVATE fleetprof_agent Threads::Threads)
set_target_properties(incident_svc PROPERTIES LINK_FLAGS "-Wl,--no-as-needed")
fp_test(test-agent-incident LABELS "agent;incident;nosan" LIBS m fp_aggtest PkgConfig::JANSSON
  ARGS spikes)
add_dependencies(test-agent-incident incident_svc fleetprof_agent)
foreach(c hang steady_ramp manual exit signal links baseline slow_by_endpoint growing
    growing_null density)
  add_test(NAME test-agent-incident-${c} COMMAND test-agent-incident ${c})
  set_tests_properties(test-agent-incident-${c} PROPERTIES TIMEOUT 300
    LABELS "agent;incident;nosan"
    ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
endforeach()
# JavaScript frames named from node --perf-basic-prof's perf map, against node --cpu-prof's
# profile of the same workload (tests/node/). Preloads the agent: plain builds only.
fp_test(test-agent-node LABELS "agent;nosan" LIBS m fp_aggtest)
add_dependencies(test-agent-node fleetprof_agent)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-node PROPERTIES DISABLED TRUE)
endif()
# The perf map reader (JIT code names) on files written by the test; sanitizer builds too.
fp_test(test-agent-perfmap LABELS "agent;overlaps" LIBS fp_agent_core)
