# How the code reads: no production function over 150 lines (tests/funclen.sh,
# universal-ctags).
add_test(NAME test-funclen COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/funclen.sh ${PROJECT_SOURCE_DIR} 150)
set_tests_properties(test-funclen PROPERTIES LABELS "docs;nosan" TIMEOUT 60)
