# Issue 18: operating fleetprof in a fleet. test-fleet-uid: agents under another uid than the
# collector (setpriv to nobody; needs root), the one-line reports of unreachable collectors and
# unwritable FLEETPROF_OUTPUT. nosan: preloads the agent into an uninstrumented fp-work.
add_executable(setuid_work programs/setuid_work.c)
fp_test(test-fleet-uid LABELS "fleet;nosan" LIBS m)
add_dependencies(test-fleet-uid fp-work setuid_work fleetprof_agent fleetprof-collector
  fleetprof-aggregator fleetprof io_work)
