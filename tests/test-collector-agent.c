#include "support/runner.h"
static void test_todo(void) { CHECK(0 && "not written yet"); }
static const tr_test_t tests[] = {{"todo", test_todo}, {0, 0}};
TR_MAIN(tests)
