/* test-agent-bypass: stands for the agent (bypass.c's "self" object): defines the hooks. */
int bp_fn(void) { return 1; }
int bp_fn2(void) { return 1; }
