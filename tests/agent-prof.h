/* What the runtime-frame tests (test-agent-python, test-agent-java, test-agent-node) share:
 * self-share profiles (a key's summed weight, its share of the total, the keys by weight, two
 * profiles' largest difference), a frame's kind and file, source paths, the cases runner.
 * Include after agent-common.h. */
#ifndef TESTS_AGENT_PROF_H
#define TESTS_AGENT_PROF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROF_MAXF 1024
typedef struct {
    char key[600]; /* the function as both profilers spell it */
    double w;
} prof_fw_t;
typedef struct {
    prof_fw_t f[PROF_MAXF];
    int n;
    double total;
} prof_t;

static inline void prof_put(prof_t *p, const char *key, double w) {
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

/* key's share of the total, in percent (0: absent) */
static inline double prof_share(const prof_t *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->f[i].key, key))
            return p->total ? 100.0 * p->f[i].w / p->total : 0;
    return 0;
}

static inline int prof_cmp(const void *a, const void *b) {
    double x = ((const prof_fw_t *)a)->w, y = ((const prof_fw_t *)b)->w;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* heaviest first */
static inline void prof_sort(prof_t *p) {
    qsort(p->f, (size_t)p->n, sizeof p->f[0], prof_cmp);
}

/* The largest difference of a key's share between ours and theirs over each side's top n;
 * prints theirs's top n (and ours's keys that differ by over a point). */
static inline double prof_worst(const prof_t *ours, const prof_t *theirs, int n, const char *us,
                                const char *them) {
    double worst = 0;
    for (int side = 0; side < 2; side++) {
        const prof_t *top = side ? ours : theirs;
        for (int i = 0; i < top->n && i < n; i++) {
            const char *key = top->f[i].key;
            double a = prof_share(ours, key), b = prof_share(theirs, key), diff = fabs(a - b);
            if ((side == 0 && (a >= 0.05 || b >= 0.05)) || (side == 1 && diff > 1))
                printf("#   %-50s %s %5.1f %%  %s %5.1f %%\n", key, us, a, them, b);
            worst = diff > worst ? diff : worst;
        }
    }
    return worst;
}

/* Is loc's function of this kind (its system name starts with "python:", "java:")? */
static inline int rt_kind(const cm_dict_t *d, uint32_t loc, const char *kind) {
    uint32_t f = d->location_function[loc];
    return f && d->function_system_name &&
           !strncmp(d->strings[d->function_system_name[f]].ptr, kind, strlen(kind));
}

static inline const char *rt_file(const cm_dict_t *d, uint32_t loc) {
    uint32_t f = d->location_function[loc];
    return f && d->function_filename ? d->strings[d->function_filename[f]].ptr : "";
}

/* A file of the source tree (FLEETPROF_SRC, else ..). */
static inline const char *rt_src(const char *rel, char *buf, size_t size) {
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(buf, size, "%s/%s", s ? s : "..", rel);
    return buf;
}

/* Folded stacks ("root;...;leaf WEIGHT" a line, py-spy's raw and async-profiler's collapsed
 * output): each line's stack (NUL-terminated in place) and weight to fn. */
static inline void rt_folded(const char *path, void (*fn)(char *stack, double w, prof_t *p),
                             prof_t *p) {
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "%s: %s", path, strerror(errno));
    static char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        char *sp = strrchr(line, ' ');
        if (!sp)
            continue;
        double w = strtod(sp + 1, NULL);
        *sp = 0;
        fn(line, w, p);
    }
    fclose(f);
}

typedef struct {
    const char *name;
    void (*fn)(void);
    int explicit_only; /* run only when named on the command line */
} rt_case_t;

/* Runs the cases named on the command line (without one: all but the explicit_only ones). */
static inline int rt_main(int argc, char **argv, const rt_case_t *cases, size_t n) {
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
