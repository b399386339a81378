/* Self shares by function from two profilers of one workload, and the largest difference
 * over both top-Ns (tests/test-agent-python.c against py-spy, tests/test-agent-node.c against
 * node --cpu-prof); and the case runner of those tests. */
#ifndef TESTS_AGENT_PROF_H
#define TESTS_AGENT_PROF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROF_MAXF 512
typedef struct {
    char key[600]; /* the function as both profilers spell it */
    double w;
} fw_t;
typedef struct {
    fw_t f[PROF_MAXF];
    int n;
    double total;
} prof_t;

static inline void prof_add(prof_t *p, const char *key, double w) {
    p->total += w;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->f[i].key, key)) {
            p->f[i].w += w;
            return;
        }
    if (p->n < PROF_MAXF) {
        snprintf(p->f[p->n].key, sizeof p->f[0].key, "%s", key);
        p->f[p->n++].w = w;
    }
}

/* key's share of p's total, in percent. */
static inline double prof_share(const prof_t *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->f[i].key, key))
            return p->total ? 100.0 * p->f[i].w / p->total : 0;
    return 0;
}

static inline int prof_cmp_fw(const void *a, const void *b) {
    double x = ((const fw_t *)a)->w, y = ((const fw_t *)b)->w;
    return x < y ? 1 : x > y ? -1 : 0;
}

static inline void prof_sort(prof_t *p) {
    qsort(p->f, (size_t)p->n, sizeof p->f[0], prof_cmp_fw);
}

/* The largest difference of shares (points) over the top n of each side (both sorted);
 * prints theirs' top n beside ours (shares of 0.05 % or more), labelled ours_name/their_name. */
static inline double prof_worst(const prof_t *ours, const prof_t *theirs, int n,
                                const char *ours_name, const char *their_name) {
    double worst = 0;
    for (int side = 0; side < 2; side++) {
        const prof_t *top = side ? ours : theirs;
        for (int i = 0; i < top->n && i < n; i++) {
            const char *key = top->f[i].key;
            double a = prof_share(ours, key), b = prof_share(theirs, key), diff = fabs(a - b);
            if (side == 0 && (a >= 0.05 || b >= 0.05))
                printf("#   %-48s %s %5.1f %%  %s %5.1f %%\n", key, ours_name, a, their_name, b);
            worst = diff > worst ? diff : worst;
        }
    }
    return worst;
}

typedef struct {
    const char *name;
    void (*fn)(void);
    int explicit_only; /* run only when named on the command line */
} prof_case_t;

/* Runs the cases named in argv (none: every case not explicit_only). */
static inline int prof_run_cases(int argc, char **argv, const prof_case_t *cases, size_t n) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
        int want = argc < 2 && !cases[i].explicit_only;
        for (int a = 1; a < argc; a++)
            want |= !strcmp(argv[a], cases[i].name);
        if (!want)
            continue;
        printf("# %s\n", cases[i].name);
        fflush(stdout);
        cases[i].fn();
        printf("ok %s\n", cases[i].name);
    }
    return 0;
}

#endif
