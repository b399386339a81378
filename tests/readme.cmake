# The READMEs as a newcomer reads them (issue 35). test-readme runs the README's "Profile your
# own program" commands as written, then pipeline.sh stop on quickstart's state layout (real
# Kafka, fixed ports 19710-19715).
add_test(NAME test-readme
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/readme/test-readme.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test-readme PROPERTIES LABELS "kafka;pipeline;nosan" TIMEOUT 300)
# Every path a README names exists (tests/readme/check-paths.py: code spans, links, *.md names).
add_test(NAME test-readme-paths
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/readme/check-paths.py ${PROJECT_SOURCE_DIR})
set_tests_properties(test-readme-paths PROPERTIES LABELS "docs;nosan" TIMEOUT 60)
# pipeline.sh refuses a registry or state another user planted and never sources pipeline.env
# (review finding 5; root: plants files owned by nobody; starts nothing, but shares stop's paths).
add_test(NAME test-pipeline-trust
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/readme/test-pipeline-trust.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test-pipeline-trust PROPERTIES LABELS "pipeline;nosan" TIMEOUT 60)
# KEEP=1 ./quickstart.sh: its printed export lines, run verbatim in a new shell, send a program's
# profile to the pipeline it left running; its printed stop stops it (fixed ports 19716-19718).
add_test(NAME test-quickstart
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/readme/test-quickstart.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test-quickstart PROPERTIES LABELS "kafka;pipeline;nosan" TIMEOUT 300)
