# The hostile-program suite (issue 13): small programs that do what real hosts do (signals,
# alternate stacks, raw clone, set*id, fork in handlers, foreign allocators, Go's runtime ...),
# each run by test-hostile twice, without and with LD_PRELOAD=libfleetprof.so, which must
# give identical stdout and exit status, no crash, no hang, and the agent's chunks
# (see the head comment of test-hostile.c and tests/hostile/README.md).
#
#   fp_hostile(<case> SOURCES <files> | GO <module dir> | PROG <installed program>
#              [TIMEOUT <s>] [REPEAT <n>] [ARGS ...] [ENV VAR=val ...] [LIBS ...]
#              [LABELS ...] [EXPECT_NO_CHUNKS "<counted reason>"])
#
# builds the program hostile-<case> (C or C++ sources; or `go build` of a Go module directory,
# done by the test fixture hostile.<case>.build with its caches in the build tree, GOFLAGS
# -mod=mod, no network), or takes a program installed by deploy/install-deps.sh (PROG, an
# absolute path: missing, the test fails), and adds the ctest test hostile.<case>. TIMEOUT bounds each run
# (default 30 s); REPEAT runs both N times.
#
# Labelled `hostile;nosan` and DISABLED in sanitizer builds: a sanitized libfleetprof.so cannot
# be preloaded into a program (the sanitizer runtime must come first), and a sanitized program
# has its interceptors in front of the agent's hooks.
add_executable(test-hostile test-hostile.c)
target_link_libraries(test-hostile PRIVATE fp_testsupport)
find_program(FP_GO go PATHS /usr/local/go/bin /usr/lib/go/bin)

function(fp_hostile name)
  cmake_parse_arguments(H "" "TIMEOUT;REPEAT;EXPECT_NO_CHUNKS;GO;PROG" "SOURCES;ARGS;ENV;LIBS;LABELS"
                        ${ARGN})
  set(exe hostile-${name})
  set(test hostile.${name})
  if(H_GO)
    set(prog ${CMAKE_CURRENT_BINARY_DIR}/hostile/${exe})
    set(gocache ${CMAKE_BINARY_DIR}/go-cache)
    add_test(NAME ${test}.build WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${H_GO}
      COMMAND ${CMAKE_COMMAND} -E env GOFLAGS=-mod=mod GOCACHE=${gocache}/build
              GOPATH=${gocache}/path GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
              ${FP_GO} build -o ${prog} .)
    set_tests_properties(${test}.build PROPERTIES FIXTURES_SETUP ${test}.fx TIMEOUT 600
      LABELS "hostile;nosan")
  elseif(H_PROG)
    set(prog ${H_PROG})
  else()
    add_executable(${exe} ${H_SOURCES})
    set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
      ${CMAKE_CURRENT_BINARY_DIR}/hostile)
    target_compile_options(${exe} PRIVATE -fno-omit-frame-pointer -Wno-shadow)
    target_link_libraries(${exe} PRIVATE Threads::Threads ${CMAKE_DL_LIBS} ${H_LIBS})
    add_dependencies(test-hostile ${exe})
    set(prog $<TARGET_FILE:${exe}>)
  endif()
  set(cmd test-hostile ${name} --prog ${prog})
  if(NOT H_TIMEOUT)
    set(H_TIMEOUT 30)
  endif()
  if(NOT H_REPEAT)
    set(H_REPEAT 1)
  endif()
  list(APPEND cmd --timeout ${H_TIMEOUT} --repeat ${H_REPEAT})
  foreach(e ${H_ENV})
    list(APPEND cmd --env ${e})
  endforeach()
  if(H_EXPECT_NO_CHUNKS)
    list(APPEND cmd --no-chunks ${H_EXPECT_NO_CHUNKS})
  endif()
  add_test(NAME ${test} COMMAND ${cmd} -- ${H_ARGS})
  math(EXPR limit "${H_TIMEOUT} * 2 * ${H_REPEAT} + 120")
  set_tests_properties(${test} PROPERTIES TIMEOUT ${limit} LABELS "hostile;nosan;${H_LABELS}"
    ENVIRONMENT "FLEETPROF_SRC=${PROJECT_SOURCE_DIR};FLEETPROF_BUILD=${PROJECT_BINARY_DIR}")
  if(H_GO)
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED ${test}.fx)
  endif()
  if(NOT FLEETPROF_SANITIZE STREQUAL "")
    set_tests_properties(${test} PROPERTIES DISABLED TRUE)
    if(H_GO)
      set_tests_properties(${test}.build PROPERTIES DISABLED TRUE)
    endif()
  endif()
endfunction()
add_dependencies(test-hostile fleetprof_agent)

# ---- cases (one program each, tests/hostile/<case>.c) ----
fp_hostile(exit_threads SOURCES hostile/exit_threads.c)
# issue 13 (h13b): short-lived children cost microseconds, not a wait for a collector
fp_hostile(spawn_loop SOURCES hostile/spawn_loop.c TIMEOUT 30
  ENV FLEETPROF_COLLECTOR=/nonexistent/fleetprof-collector.sock)
# issue 13 (h13b): a daemon closing every descriptor, then reusing the numbers
fp_hostile(fd_daemon SOURCES hostile/fd_daemon.c TIMEOUT 20
  ENV FLEETPROF_COLLECTOR=/tmp/fp-hostile-fd-daemon-collector.sock)
# issue 13 (h13b): the agent takes no descriptor from a program at RLIMIT_NOFILE=16
fp_hostile(nofile_16 SOURCES hostile/nofile_16.c TIMEOUT 20)
# issue 13 (h13a): signals, stacks, threads, privileges, sandboxes, foreign allocators, Go
fp_hostile(sigalrm_thread SOURCES hostile/sigalrm_thread.c)
fp_hostile(siglongjmp_alarm SOURCES hostile/siglongjmp_alarm.c)
fp_hostile(altstack_overflow SOURCES hostile/altstack_overflow.c
  ENV FLEETPROF_CONTROLLER=0 FLEETPROF_CPU_HZ=1000)
fp_hostile(small_stack SOURCES hostile/small_stack.c
  ENV FLEETPROF_CONTROLLER=0 FLEETPROF_CPU_HZ=1000)
fp_hostile(python_sigterm SOURCES hostile/python_sigterm.c)
fp_hostile(rtsig_default SOURCES hostile/rtsig_default.c)
fp_hostile(sigterm_chain SOURCES hostile/sigterm_chain.c)
fp_hostile(sigterm_default SOURCES hostile/sigterm_default.c)
fp_hostile(sigpending_limit SOURCES hostile/sigpending_limit.c)
# issue 27: RLIMIT_SIGPENDING 1 and 4 as nobody: the program's own timer and sigqueue as
# without the agent; 300 with every signal blocked: at most 2 signals pending
fp_hostile(sigq_nobody_1 SOURCES hostile/sigq_nobody.c ARGS 1 own)
fp_hostile(sigq_nobody_4 SOURCES hostile/sigq_nobody.c ARGS 4 own)
fp_hostile(sigq_nobody_300 SOURCES hostile/sigq_nobody.c ARGS 300 blockall)
fp_hostile(raw_clone SOURCES hostile/raw_clone.c TIMEOUT 10
  ENV FLEETPROF_CONTROLLER=0 FLEETPROF_CPU_HZ=1000)
fp_hostile(setxid SOURCES hostile/setxid.c)
fp_hostile(setxid_drop SOURCES hostile/setxid_drop.c)
# issue 27: real privilege drops; our thread takes the credentials of the thread that changes
# its own (KEEPCAPS, capset, securebits, bounding and ambient sets): setpriv and the libcap
# program aborted in glibc's setxid_error before. 20 runs each.
set(fp_exec_only "the program execs a short-lived command as nobody: nothing to say before")
fp_hostile(setpriv_clear_groups PROG /usr/bin/setpriv REPEAT 20 TIMEOUT 10
  ARGS --reuid=65534 --regid=65534 --clear-groups /bin/echo hi EXPECT_NO_CHUNKS ${fp_exec_only})
fp_hostile(setpriv_init_groups PROG /usr/bin/setpriv REPEAT 20 TIMEOUT 10
  ARGS --reuid=65534 --regid=65534 --init-groups --inh-caps=-all --bounding-set=-all /bin/id
  EXPECT_NO_CHUNKS ${fp_exec_only})
fp_hostile(capsh_user PROG /usr/sbin/capsh REPEAT 20 TIMEOUT 10 ARGS --user=nobody -- -c id
  EXPECT_NO_CHUNKS ${fp_exec_only})
fp_hostile(capsh_keep PROG /usr/sbin/capsh REPEAT 20 TIMEOUT 10
  ARGS --keep=1 --user=nobody --caps=cap_net_bind_service+eip -- -c id
  EXPECT_NO_CHUNKS ${fp_exec_only})
fp_hostile(gosu PROG /usr/sbin/gosu REPEAT 20 TIMEOUT 10 ARGS nobody id
  EXPECT_NO_CHUNKS ${fp_exec_only})
# our thread cannot take main's credentials back (a thread dropped its own, then exited):
# profiling stops before main's setresuid, which aborted the process before
fp_hostile(setxid_give_up SOURCES hostile/setxid_give_up.c)
fp_hostile(setxid_libcap SOURCES hostile/setxid_libcap.c LIBS cap REPEAT 20 TIMEOUT 20)
# review of issue 27: a set*id from a signal handler as the program's first (no dlsym there);
# our thread answers nothing (a slow start-up step) while a handler jumps out of a set*id that
# holds the agent's lock: a later set*id waits a bounded time, profiling stops, our thread
# exits before the broadcast
fp_hostile(setxid_in_handler SOURCES hostile/setxid_in_handler.c REPEAT 5)
fp_hostile(setxid_slow SOURCES hostile/setxid_slow.c TIMEOUT 20 EXPECT_NO_CHUNKS
  "profiling stops before the first chunk (the start-up step is 8 s long)"
  ENV FLEETPROF_TEST_CFI_DELAY_MS=8000)
fp_hostile(fork_in_handler SOURCES hostile/fork_in_handler.c TIMEOUT 20 REPEAT 5)
fp_hostile(seccomp_strict SOURCES hostile/seccomp_strict.c)
fp_hostile(jemalloc_sized SOURCES hostile/jemalloc_sized.c
  LIBS /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ENV FLEETPROF_ALLOC_PERIOD=4096)
# issue 13 (h13m): a malloc of the program's own that only its main thread may call; the agent
# samples CPU, wall, allocations (inert: the program's malloc is not ours), locks and I/O
fp_hostile(own_malloc_thread SOURCES hostile/own_malloc_thread.c TIMEOUT 30 ARGS 2
  ENV FLEETPROF_WALL_HZ=100 FLEETPROF_LOCK_THRESHOLD=1 FLEETPROF_IO_FLOOR=0
  FLEETPROF_IO_THRESHOLD=0.01)
# -fno-builtin: a malloc family of the program's own must not be taken for the C library's,
# whose calls the compiler may drop or reorder, assuming they touch no memory the program sees
# (this one's bump pointer is a global); built by clang without it, the program alone crashed
target_compile_options(hostile-own_malloc_thread PRIVATE -fno-builtin)
# the same malloc family in a shared library the program links (after the preloaded agent);
# no collector there: the agent's first log line is its warning, on its own thread
add_library(hostile_own_malloc SHARED hostile/own_malloc_thread.c)
target_compile_definitions(hostile_own_malloc PRIVATE main=own_malloc_main)
target_compile_options(hostile_own_malloc PRIVATE -Wno-shadow -fno-builtin)
target_link_libraries(hostile_own_malloc PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
set_target_properties(hostile_own_malloc PROPERTIES LIBRARY_OUTPUT_DIRECTORY
  ${CMAKE_CURRENT_BINARY_DIR}/hostile)
fp_hostile(own_malloc_lib SOURCES hostile/own_malloc_lib.c TIMEOUT 30 ARGS 2
  LIBS hostile_own_malloc
  ENV FLEETPROF_COLLECTOR=/nonexistent/fp-own-malloc.sock FLEETPROF_WALL_HZ=100 FLEETPROF_LOCK_THRESHOLD=1 FLEETPROF_IO_FLOOR=0
  FLEETPROF_IO_THRESHOLD=0.01)
fp_hostile(cxx_exceptions SOURCES hostile/cxx_exceptions.cc)
fp_hostile(threads_3000 SOURCES hostile/threads_3000.c TIMEOUT 60)
fp_hostile(cgo GO hostile/cgo REPEAT 10 TIMEOUT 60)
fp_hostile(exec_signal SOURCES hostile/exec_signal.c TIMEOUT 60 ENV FLEETPROF_WALL_HZ=1000)
fp_hostile(raw_fork SOURCES hostile/raw_fork.c TIMEOUT 30)
# Thread churn against the registry's /proc scans and slot reuse (each run ~4 s; a run caught
# the retired-live-thread bug 4 times in 10, so three runs).
fp_hostile(thread_churn SOURCES hostile/thread_churn.c TIMEOUT 30 REPEAT 3)
# dlclose of code on sampled stacks (issue 13 and 14): 300 cycles, 2 threads burning in it.
add_library(hostile_dlclose_lib MODULE hostile/dlclose_lib.c)
target_compile_options(hostile_dlclose_lib PRIVATE -O2 -fomit-frame-pointer)
set_target_properties(hostile_dlclose_lib PROPERTIES LIBRARY_OUTPUT_DIRECTORY
  ${CMAKE_CURRENT_BINARY_DIR}/hostile)
fp_hostile(dlclose_cycles SOURCES hostile/dlclose_cycles.c TIMEOUT 60
  ARGS $<TARGET_FILE:hostile_dlclose_lib> ENV FLEETPROF_CPU_HZ=1000 FLEETPROF_CPU_RATE=2000
  FLEETPROF_WALL_HZ=1000)
add_dependencies(test-hostile hostile_dlclose_lib)
