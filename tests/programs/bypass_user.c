/* test-agent-bypass: calls the hooks through its PLT and takes an address through its GOT.
 * Built twice: BIND_NOW with RELRO (slots bound at load, on read-only pages) and lazy without
 * RELRO (a slot not called yet holds its own PLT stub). BP_PREFIX names each copy's entries. */
int bp_fn(void);
int bp_fn2(void);
int bp_other(void);
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define N(x) CAT(BP_PREFIX, x)
int N(call)(void) { return bp_fn(); }
int N(call2)(void) { return bp_fn2(); }
int N(call_other)(void) { return bp_other(); }
void *N(addr)(void) { return (void *)bp_fn2; }
