/* bypass.c on its own (issue 14): GOT slots bound to "the agent's" hooks are rewritten to the
 * real function, in BIND_NOW objects (slots on RELRO pages, which stay read-only) and lazy ones
 * (slots not bound yet), for PLT calls and GLOB_DAT addresses; a slot bound to another
 * object's definition is left alone; a second pass finds nothing to do.
 *
 * libbypass_agent.so plays the agent (it defines bp_fn and bp_fn2, the "hooks", returning 1);
 * bp_real (here, returning 2) is "the real function". libbypass_now.so and libbypass_lazy.so
 * call them through their PLTs; libbypass_other.so defines bp_other, listed too but not the
 * agent's. */
#include "support/runner.h"

#include "bypass.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

int bp_fn(void);
int now_call(void), now_call2(void), now_call_other(void);
void *now_addr(void);
int lazy_call(void), lazy_call2(void), lazy_call_other(void);
void *lazy_addr(void);

static int bp_real(void) { return 2; }
static int bp_other_real(void) { return 4; }

/* The permissions of every mapping of the file whose name contains part, concatenated. */
static void perms_of(const char *part, char *out, size_t size) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    size_t n = 0;
    out[0] = '\0';
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, part) && n + 6 < size) {
            char *sp = strchr(line, ' ');
            memcpy(out + n, sp + 1, 4);
            out[n + 4] = ',';
            n += 5;
            out[n] = '\0';
        }
    if (f)
        fclose(f);
}

/* The image (lowest to highest loaded byte) of the object holding r->lo: what hooks.c finds
 * for the agent (ag_self_lo, ag_self_hi). */
typedef struct {
    uintptr_t lo, hi;
} range_t;

static int image_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    range_t *r = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD) {
            uintptr_t a = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            lo = a < lo ? a : lo;
            hi = a + info->dlpi_phdr[i].p_memsz > hi ? a + info->dlpi_phdr[i].p_memsz : hi;
        }
    if (r->lo < lo || r->lo >= hi)
        return 0;
    r->lo = lo;
    r->hi = hi;
    return 1;
}

static void test_rewrite(void) {
    /* bound: the BIND_NOW copy; the lazy copy is not called before the pass */
    CHECK_EQ(now_call(), 1);
    CHECK_EQ(now_call2(), 1);
    void *hook2 = dlsym(RTLD_DEFAULT, "bp_fn2");
    CHECK(hook2 != NULL && now_addr() == hook2);
    char before[256], after[256];
    perms_of("libbypass_now", before, sizeof before);
    CHECK(strstr(before, "r--p") != NULL); /* its RELRO, read-only */

    const ag_bypass_t list[] = {
        {"bp_fn", (uintptr_t)bp_real},
        {"bp_fn2", (uintptr_t)bp_real},
        {"bp_other", (uintptr_t)bp_other_real},
    };
    ag_bypass_stats_t st;
    range_t agent = {(uintptr_t)dlsym(RTLD_DEFAULT, "bp_fn"), 0};
    CHECK(dl_iterate_phdr(image_cb, &agent) == 1);
    ag_bypass_apply(list, 3, agent.lo, agent.hi, &st);
    /* now: call, call2, addr's GLOB_DAT (bp_fn2's PLT slot and its GOT slot may be one) */
    CHECK_EQ(now_call(), 2);
    CHECK_EQ(now_call2(), 2);
    CHECK(now_addr() == (void *)bp_real);
    /* lazy: slots never bound before the pass */
    CHECK_EQ(lazy_call(), 2);
    CHECK_EQ(lazy_call2(), 2);
    CHECK(lazy_addr() == (void *)bp_real);
    /* bound to libbypass_other.so, not to the agent: untouched (the lazy copy's PLT slot of
     * bp_other is unbound: what the resolver binds is not the agent's, but the pass cannot
     * tell; it would be rewritten, so it is not called here) */
    CHECK_EQ(now_call_other(), 3);
    CHECKF(st.foreign >= 1, "foreign %u", st.foreign);
    CHECKF(st.objects >= 2 && st.slots >= 5 && st.failed == 0, "objects %u slots %u failed %u",
           st.objects, st.slots, st.failed);
    /* this program's call too (it is a user like the others); the agent's function itself is
     * unchanged */
    CHECK_EQ(bp_fn(), 2);
    int (*hook)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "bp_fn");
    CHECK(hook != NULL && hook() == 1);
    perms_of("libbypass_now", after, sizeof after);
    CHECKF(!strcmp(before, after), "mappings %s -> %s", before, after);

    ag_bypass_stats_t again;
    ag_bypass_apply(list, 3, agent.lo, agent.hi, &again);
    CHECKF(again.slots == 0 && again.failed == 0, "second pass: %u slots", again.slots);
}

static const tr_test_t tests[] = {
    {"rewrite", test_rewrite},
    {NULL, NULL},
};

TR_MAIN(tests)
