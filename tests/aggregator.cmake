# Aggregator tests: store and retention without Kafka, then end to end with a real broker
# (test-aggregator: port 19510; test-aggregator-chaos: SIGKILLs and rebalances, port 19520;
# labelled slow: the sanitizer passes of test.sh skip it, the normal build runs it).
fp_test(test-aggregator LABELS "aggregator;kafka" LIBS fp_aggtest)
fp_test(test-aggregator-chaos LABELS "aggregator;kafka;slow" LIBS fp_aggtest)
add_dependencies(test-aggregator fleetprof-aggregator)
add_dependencies(test-aggregator-chaos fleetprof-aggregator)
