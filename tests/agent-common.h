/* Shared helpers of the agent tests (test-agent.c, test-agent-alloc.c, -lock.c, -io.c): start a
 * program under libfleetprof, collect its output, read its chunks back with the codec. */
#ifndef TESTS_AGENT_COMMON_H
#define TESTS_AGENT_COMMON_H
#define _GNU_SOURCE
#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/wire.h"
#include "support/runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define UNUSED __attribute__((unused))
static UNUSED double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static UNUSED const char *bdir(void) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    return b;
}

static UNUSED void prog_path(const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/tests/%s", bdir(), name);
}

static UNUSED char *mkout(void) {
    char *d = strdup("/tmp/fp-agent-test-XXXXXX");
    CHECK(mkdtemp(d) != NULL);
    return d;
}

typedef struct {
    pid_t pid;
    int out_fd;
} proc_t;

/* Starts argv with env entries "K=V" added (and the FLEETPROF_* of ours cleared first). */
static UNUSED proc_t start(const char *const *env, const char *const *argv) {
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        static const char *clear[] = {"FLEETPROF_SERVICE", "FLEETPROF_VERSION",
                                      "FLEETPROF_OUTPUT", "FLEETPROF_COLLECTOR",
                                      "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                                      "FLEETPROF_ENABLED", "LD_PRELOAD", NULL};
        for (int i = 0; clear[i]; i++)
            unsetenv(clear[i]);
        setenv("FLEETPROF_COLLECTOR", "none", 1);
        for (int i = 0; env && env[i]; i++)
            putenv(strdup(env[i]));
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    return (proc_t){pid, p[0]};
}
/* Waits up to timeout s; collects stdout into out. Returns the wait status (-1: killed). */
static UNUSED int finish(proc_t pr, double timeout, char *out, size_t size) {
    double end = now_s() + timeout;
    size_t len = 0;
    int st = -1;
    fcntl(pr.out_fd, F_SETFL, O_NONBLOCK);
    for (;;) {
        ssize_t r;
        while (out && len + 1 < size && (r = read(pr.out_fd, out + len, size - 1 - len)) > 0)
            len += (size_t)r;
        pid_t w = waitpid(pr.pid, &st, WNOHANG);
        if (w == pr.pid)
            break;
        if (now_s() > end) {
            kill(pr.pid, SIGKILL);
            waitpid(pr.pid, &st, 0);
            st = -1;
            break;
        }
        struct pollfd pf = {pr.out_fd, POLLIN, 0};
        poll(&pf, 1, 20);
    }
    ssize_t r;
    while (out && len + 1 < size && (r = read(pr.out_fd, out + len, size - 1 - len)) > 0)
        len += (size_t)r;
    if (out)
        out[len] = '\0';
    close(pr.out_fd);
    return st;
}

static UNUSED int run(const char *const *env, const char *const *argv, double timeout, char *out,
               size_t size) {
    return finish(start(env, argv), timeout, out, size);
}

static UNUSED uint64_t out_u64(const char *out, const char *key) {
    const char *p = strstr(out, key);
    CHECKF(p != NULL, "'%s' missing in program output: %s", key, out);
    return strtoull(p + strlen(key), NULL, 10);
}

/* ---- reading chunks ---- */

typedef struct {
    cm_chunk_t *c[512];
    char name[512][128];
    int n;
} chunks_t;

static UNUSED int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static UNUSED chunks_t *load(const char *dir) {
    chunks_t *cs = calloc(1, sizeof *cs);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, CM_CHUNK_FILE_SUFFIX))
            names[n++] = strdup(e->d_name);
        else
            CHECKF(strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0,
                   "stray file %s (temporary files must be renamed or removed)", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)sz + 1);
        CHECK(fread(buf, 1, (size_t)sz, f) == (size_t)sz);
        fclose(f);
        char err[256];
        int rc = cm_chunk_decode(buf, (size_t)sz, &cs->c[cs->n], err, sizeof err);
        CHECKF(rc == 0, "%s: %s: %s", names[i], cm_errname(rc), err);
        snprintf(cs->name[cs->n], sizeof cs->name[0], "%s", names[i]);
        cs->n++;
        free(buf);
        free(names[i]);
    }
    return cs;
}

static UNUSED const char *loc_fn(const cm_dict_t *d, uint32_t loc) {
    uint32_t f = d->location_function[loc];
    return f ? d->strings[d->function_name[f]].ptr : "";
}

static UNUSED int stack_has(const cm_dict_t *d, uint32_t st, const char *fn) {
    for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++)
        if (!strcmp(loc_fn(d, d->stack_frames[k]), fn))
            return 1;
    return 0;
}

/* Prints a stack's function names, leaf first (diagnostics of a failed check). */
static UNUSED void stack_print(const char *what, const cm_dict_t *d, uint32_t st) {
    printf("# %s:", what);
    for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++) {
        const char *fn = loc_fn(d, d->stack_frames[k]);
        printf(" %s", fn[0] ? fn : "?");
    }
    printf("\n");
}

typedef struct {
    uint64_t weight, samples;
} tot_t;

/* Sum of weights and samples of type whose stack contains fn (NULL: all); pid 0: any. */
static UNUSED tot_t total(const chunks_t *cs, cm_event_type_t type, const char *fn, uint32_t pid) {
    tot_t t = {0, 0};
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        if (pid && c->header.pid != pid)
            continue;
        const cm_samples_t *s = &c->samples[type];
        for (uint32_t r = 0; r < s->n; r++)
            if (!fn || stack_has(&c->dict, s->stack[r], fn)) {
                t.weight += s->weight[r];
                t.samples++;
            }
    }
    return t;
}

/* Distinct thread ids of the CPU samples whose stack contains fn, counting at most cap
 * (ids kept in tids[cap]). */
static UNUSED int distinct_threads(const chunks_t *cs, const char *fn, uint32_t *tids, int cap) {
    int ntids = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            if (!stack_has(&c->dict, s->stack[r], fn))
                continue;
            uint32_t tid = c->dict.thread_tid[CM_COL(s, thread, r)];
            int k = 0;
            while (k < ntids && tids[k] != tid)
                k++;
            if (k == ntids && ntids < cap)
                tids[ntids++] = tid;
        }
    }
    return ntids;
}

static UNUSED uint64_t drops(const chunks_t *cs, uint32_t reason) {
    uint64_t n = 0;
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].reason == reason)
                n += cs->c[i]->header.drops[k].count;
    return n;
}

static UNUSED void free_chunks(chunks_t *cs) {
    for (int i = 0; i < cs->n; i++)
        cm_chunk_free(cs->c[i]);
    free(cs);
}

static UNUSED void rmrf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

#define ENV_OUT(dir) (snprintf(envbuf, sizeof envbuf, "FLEETPROF_OUTPUT=%s", dir), envbuf)

/* ---- tests ---- */

/* CPU profile accuracy: burn_b does 3x burn_a's work, so it must get 75% of CPU samples, and
 * the sum of sample weights must match the process CPU time measured by the program. */

/* Like total() but only rows whose flags contain all of want and none of avoid. */
static UNUSED tot_t total_flags(const chunks_t *cs, cm_event_type_t type, const char *fn,
                                uint32_t want, uint32_t avoid) {
    tot_t t = {0, 0};
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[type];
        for (uint32_t r = 0; r < s->n; r++) {
            uint32_t f = CM_COL(s, flags, r);
            if ((f & want) != want || (f & avoid))
                continue;
            if (!fn || stack_has(&c->dict, s->stack[r], fn)) {
                t.weight += s->weight[r];
                t.samples++;
            }
        }
    }
    return t;
}

/* Sum of count (milli-events) of type whose stack contains fn. */
static UNUSED uint64_t total_count(const chunks_t *cs, cm_event_type_t type, const char *fn) {
    uint64_t n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[type];
        for (uint32_t r = 0; r < s->n; r++)
            if (!fn || stack_has(&c->dict, s->stack[r], fn))
                n += cm_samples_count(s, r);
    }
    return n;
}

/* Function name of the leaf frame of a row's stack. */
/* The call site of a hooked call's event: its stack's leaf is the real function the
 * application called (malloc, read, pthread_mutex_lock... in libc or libstdc++, issue 14), named
 * once, and the frame under it is the site. A leaf in libfleetprof itself, or a leaf without a
 * caller, yields "<bad leaf>" so that every site check fails. */
static UNUSED const char *leaf_fn(const cm_chunk_t *c, uint32_t stack) {
    const cm_dict_t *d = &c->dict;
    uint32_t a = d->stack_off[stack], b = d->stack_off[stack + 1];
    if (b - a < 2)
        return "<bad leaf>";
    uint32_t leaf = d->stack_frames[b - 1], m = d->location_mapping[leaf];
    const char *path = m && m < d->n_mappings ? d->strings[d->mappings[m].filename].ptr : "";
    if (strstr(path, "libfleetprof") || !(strstr(path, "libc.so") || strstr(path, "libstdc++")))
        return "<bad leaf>";
    return loc_fn(d, d->stack_frames[b - 2]);
}

static UNUSED const char *preload(char *buf, size_t size) {
    snprintf(buf, size, "LD_PRELOAD=%s/agent/libfleetprof.so", bdir());
    return buf;
}

#endif
