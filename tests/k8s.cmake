# Issue 18: the Kubernetes manifests (deploy/k8s) against the Kubernetes schemas
# (kubernetes-validate, in a venv under ~/.cache/fleetprof) and the operating rules.
add_test(NAME test-k8s COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/k8s/test-k8s.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test-k8s PROPERTIES LABELS "k8s;nosan" TIMEOUT 300)
