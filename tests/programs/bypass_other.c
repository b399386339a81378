/* test-agent-bypass: a definition of a listed name that is not the agent's. */
int bp_other(void) { return 3; }
