# Issue 28: the agent in setuid programs (secure-execution mode) and its chunk files in a
# shared FLEETPROF_OUTPUT. Needs root (a setuid-root copy of fp-work-linked run as nobody).
# nosan: fp-work is not instrumented, and a sanitized agent cannot run setuid.
add_library(secure_evil SHARED programs/secure_evil.c)
set_target_properties(secure_evil PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
fp_test(test-agent-secure LABELS "agent;nosan;overlaps")
add_dependencies(test-agent-secure fp-work fp-work-linked fleetprof_agent secure_evil)
if(NOT FLEETPROF_SANITIZE STREQUAL "")
  set_tests_properties(test-agent-secure PROPERTIES DISABLED TRUE)
endif()
