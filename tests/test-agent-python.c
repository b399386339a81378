/* CPython frames in native stacks (issue 34), on Debian's /usr/bin/python3 (3.11):
 *   offsets_dwarf       the 3.11 structure offsets pyframes.c reads match python3.11-dbg's DWARF
 *                       (gdb on /usr/bin/python3.11)
 *   frames_and_threads  a live interpreter (tests/python/nested.py): outer -> middle ->
 *                       inner_loop on the main thread, with their file and lines; a second
 *                       thread's spinner; a sleeping thread's wall samples (it never holds the
 *                       GIL when sampled) with time.sleep's native frames under its Python
 *                       frame; >= 95 % of samples that ran the interpreter carry a Python frame
 *   pyspy_compare       tests/python/mixed.py (loops, json, re, hashlib) under the agent and
 *                       py-spy at once (`py-spy record --format raw --nonblocking`, installed
 *                       by tests/python/py-spy-venv.sh), 15 s: each of the top-20 Python
 *                       functions' self share (innermost Python frame) within 3 points of
 *                       py-spy's, in the agent's wall samples (1 kHz) and in its CPU samples
 *                       (>= 2000); >= 99 % of interpreter samples with a Python frame.
 *                       Single-threaded: with threads py-spy counts a thread waiting for a
 *                       core as active, the CPU samples do not. No deep recursion on the main
 *                       thread: py-spy --nonblocking gave fib(18) 2-4 points less than its
 *                       thread CPU time (bench/RESULTS.md), the agent within 1.
 * Preloads the agent into python3: plain builds only (label nosan).
 */
#include "agent-common.h"
#include "../agent/src/handler/pyframes.h"
#include "agent-prof.h"

#include <ctype.h>

#define PY "/usr/bin/python3"

static char envbuf[4200], pre[4200];

#define src_path rt_src
#define fn_file rt_file

static int is_py(const cm_dict_t *d, uint32_t loc) { return rt_kind(d, loc, "python:"); }

static uint32_t loc_line(const cm_dict_t *d, uint32_t loc) {
    return d->location_line ? d->location_line[loc] : 0;
}

/* ---- offsets_dwarf ---- */

static void offsets_dwarf(void) {
    static const struct {
        const char *expr;
        long want;
    } o[] = {
        {"(long)&((struct pyruntimestate*)0)->interpreters.head", PY311_RT_INTERP_HEAD},
        {"(long)&((struct _is*)0)->threads.head", PY311_IS_THREADS_HEAD},
        {"(long)&((struct _is*)0)->runtime", PY311_IS_RUNTIME},
        {"(long)&((struct _ts*)0)->next", PY311_TS_NEXT},
        {"(long)&((struct _ts*)0)->interp", PY311_TS_INTERP},
        {"(long)&((struct _ts*)0)->cframe", PY311_TS_CFRAME},
        {"(long)&((struct _ts*)0)->native_thread_id", PY311_TS_NATIVE_TID},
        {"(long)&((struct _PyCFrame*)0)->current_frame", PY311_CF_CURRENT},
        {"(long)&((struct _PyInterpreterFrame*)0)->f_code", PY311_IF_CODE},
        {"(long)&((struct _PyInterpreterFrame*)0)->previous", PY311_IF_PREVIOUS},
        {"(long)&((struct _PyInterpreterFrame*)0)->prev_instr", PY311_IF_PREV_INSTR},
        {"(long)&((struct _PyInterpreterFrame*)0)->is_entry", PY311_IF_IS_ENTRY},
        {"(long)&((struct _PyInterpreterFrame*)0)->owner", PY311_IF_OWNER},
        {"(long)&((PyCodeObject*)0)->co_firstlineno", PY311_CO_FIRSTLINE},
        {"(long)&((PyCodeObject*)0)->co_filename", PY311_CO_FILENAME},
        {"(long)&((PyCodeObject*)0)->co_name", PY311_CO_NAME},
        {"(long)&((PyCodeObject*)0)->co_qualname", PY311_CO_QUALNAME},
        {"(long)&((PyCodeObject*)0)->co_linetable", PY311_CO_LINETABLE},
        {"(long)&((PyCodeObject*)0)->co_code_adaptive", PY311_CO_CODE},
        {"(long)&((PyBytesObject*)0)->ob_sval", PY311_BY_DATA},
        {"(long)&((PyASCIIObject*)0)->state", PY311_UO_STATE},
        {"sizeof(PyASCIIObject)", PY311_UO_ASCII_DATA},
        {"(long)&((PyCompactUnicodeObject*)0)->utf8", PY311_UO_UTF8},
        {"sizeof(PyCompactUnicodeObject)", PY311_UO_DATA},
    };
    size_t n = sizeof o / sizeof o[0];
    const char *argv[4 + 2 * (sizeof o / sizeof o[0]) + 2];
    size_t k = 0;
    argv[k++] = "/usr/bin/gdb";
    argv[k++] = "-batch";
    argv[k++] = "-nx";
    for (size_t i = 0; i < n; i++) {
        argv[k++] = "-ex";
        char *e = malloc(200);
        snprintf(e, 200, "print %s", o[i].expr);
        argv[k++] = e;
    }
    argv[k++] = "/usr/bin/python3.11";
    argv[k] = NULL;
    static char out[16384];
    int st = run(NULL, argv, 120, out, sizeof out);
    CHECKF(st == 0, "gdb failed (%d): %s", st, out);
    const char *p = out;
    for (size_t i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "$%zu = ", i + 1);
        const char *q = strstr(p, key);
        CHECKF(q != NULL, "gdb printed no %s (%s): is python3.11-dbg installed? %s", key,
               o[i].expr, out);
        long got = strtol(q + strlen(key), NULL, 10);
        CHECKF(got == o[i].want, "%s: DWARF says %ld, pyframes.h %ld", o[i].expr, got,
               o[i].want);
        p = q;
    }
    for (size_t i = 4; i < k; i += 2)
        free((char *)argv[i]);
    printf("# %zu offsets match python3.11-dbg's DWARF\n", n);
}

/* ---- frames_and_threads ---- */

/* Line number of the line of file containing marker. */
static uint32_t marker_line(const char *file, const char *marker) {
    FILE *f = fopen(file, "r");
    CHECK(f != NULL);
    char line[512];
    uint32_t n = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        if (strstr(line, marker) && !found)
            found = n;
    }
    fclose(f);
    CHECKF(found, "%s: no %s", file, marker);
    return found;
}

typedef struct {
    uint64_t py, interp_only;         /* samples with a Python frame; in the interpreter, none */
    uint64_t inner, inner_ordered;    /* innermost Python frame inner_loop; under middle, outer */
    uint64_t inner_at_line[2];        /* inner_loop at the while line, at LINE_INNER */
    uint64_t inner_bad_line, inner_bad_file;
    uint64_t spinner, spinner_run;    /* spinner; under Thread.run */
} nested_t;

/* Stack frames are root first: the innermost Python frame is the last Python one. */
static void nested_cpu(const cm_chunk_t *c, uint32_t line_inner, nested_t *r) {
    const cm_samples_t *s = &c->samples[CM_EV_CPU];
    const cm_dict_t *d = &c->dict;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t st = s->stack[i], a = d->stack_off[st], b = d->stack_off[st + 1];
        int32_t leaf = -1;
        int eval = 0;
        for (uint32_t k = a; k < b; k++) {
            if (is_py(d, d->stack_frames[k]))
                leaf = (int32_t)k;
            else if (!strcmp(loc_fn(d, d->stack_frames[k]), "_PyEval_EvalFrameDefault"))
                eval = 1;
        }
        if (leaf < 0) {
            r->interp_only += eval;
            if (eval)
                stack_print("in the interpreter, no Python frame", d, st);
            continue;
        }
        r->py++;
        uint32_t lf = d->stack_frames[leaf];
        const char *name = loc_fn(d, lf);
        if (!strcmp(name, "inner_loop")) {
            r->inner++;
            const char *file = fn_file(d, lf);
            r->inner_bad_file += strlen(file) < 9 || strcmp(file + strlen(file) - 9, "nested.py");
            uint32_t ln = loc_line(d, lf);
            if (ln == line_inner - 1 || ln == line_inner)
                r->inner_at_line[ln - line_inner + 1]++;
            else
                r->inner_bad_line++;
            if (leaf >= 2 && (uint32_t)leaf - 2 >= a &&
                !strcmp(loc_fn(d, d->stack_frames[leaf - 1]), "middle") &&
                !strcmp(loc_fn(d, d->stack_frames[leaf - 2]), "outer"))
                r->inner_ordered++;
        } else if (!strcmp(name, "spinner")) {
            r->spinner++;
            r->spinner_run += stack_has(d, st, "Thread.run");
        }
    }
}

/* Wall samples of the sleeper: its Python frame with native frames (time.sleep) under it. */
static uint64_t nested_sleeper(const cm_chunk_t *c) {
    const cm_samples_t *s = &c->samples[CM_EV_WALL];
    const cm_dict_t *d = &c->dict;
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t st = s->stack[i], a = d->stack_off[st], b = d->stack_off[st + 1];
        for (uint32_t k = a; k + 1 < b; k++)
            if (!strcmp(loc_fn(d, d->stack_frames[k]), "sleeper") &&
                is_py(d, d->stack_frames[k]) && !is_py(d, d->stack_frames[k + 1])) {
                n++;
                break;
            }
    }
    return n;
}

static void frames_and_threads(void) {
    char script[4096], out[8192];
    src_path("tests/python/nested.py", script, sizeof script);
    uint32_t line_inner = marker_line(script, "# LINE_INNER");
    char *dir = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=200",
                         "FLEETPROF_CPU_RATE=1000", "FLEETPROF_WALL_HZ=50",
                         "FLEETPROF_LOG_LEVEL=info", NULL};
    const char *argv[] = {PY, script, "3", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(st == 0 && strstr(out, "done"), "nested.py failed (%d): %s", st, out);
    chunks_t *cs = load(dir);
    CHECK(cs->n > 0);
    nested_t r = {0};
    uint64_t sleeper = 0;
    for (int i = 0; i < cs->n; i++) {
        nested_cpu(cs->c[i], line_inner, &r);
        sleeper += nested_sleeper(cs->c[i]);
    }
    printf("# python samples %" PRIu64 ", in the interpreter without one %" PRIu64
           "; inner_loop %" PRIu64 " (ordered %" PRIu64 ", lines %" PRIu64 "/%" PRIu64
           ", bad line %" PRIu64 ", bad file %" PRIu64 "); spinner %" PRIu64 " (%" PRIu64
           " under Thread.run); sleeper wall %" PRIu64 "\n",
           r.py, r.interp_only, r.inner, r.inner_ordered, r.inner_at_line[0], r.inner_at_line[1],
           r.inner_bad_line, r.inner_bad_file, r.spinner, r.spinner_run, sleeper);
    CHECKF(r.inner >= 50, "inner_loop: %" PRIu64 " samples", r.inner);
    CHECK(r.inner_ordered == r.inner);
    CHECK(r.inner_bad_file == 0);
    CHECK(r.inner_bad_line == 0);
    CHECK(r.inner_at_line[0] > 0 && r.inner_at_line[1] > 0);
    CHECKF(r.spinner >= 50, "spinner: %" PRIu64 " samples", r.spinner);
    CHECK(r.spinner_run == r.spinner);
    CHECKF(sleeper >= 10, "sleeper's wall samples with Python frames: %" PRIu64, sleeper);
    /* 3 s: the interpreter's start-up (samples before the first unwind tables, unwound
     * later from stack copies, carry no Python frames) weighs more than in pyspy_compare's 15 s,
     * which checks the 99 % */
    CHECKF(r.py * 100 >= (r.py + r.interp_only) * 95,
           "%" PRIu64 " of %" PRIu64 " interpreter samples with a Python frame", r.py,
           r.py + r.interp_only);
    free_chunks(cs);
    rmrf(dir);
    free(dir);
}

/* ---- pyspy_compare ---- */

/* A Python function's key: its name's last dotted component + " " + its file's basename. */
static void prof_add(prof_t *p, const char *name, const char *file, double w) {
    const char *dot = strrchr(name, '.'), *slash = strrchr(file, '/');
    /* "<locals>.<genexpr>": the last component keeps its brackets */
    char key[160];
    snprintf(key, sizeof key, "%s %s", dot && dot[1] ? dot + 1 : name, slash ? slash + 1 : file);
    prof_put(p, key, w);
}

/* py-spy raw: "frame;...;leaf COUNT", a frame "name (file:line)". */
static void pyspy_line(char *line, double w, prof_t *p) {
    char *leaf = strrchr(line, ';');
    leaf = leaf ? leaf + 1 : line;
    char *paren = strstr(leaf, " (");
    if (!paren)
        return;
    *paren = 0;
    char *file = paren + 2, *colon = strrchr(file, ':');
    if (colon)
        *colon = 0;
    prof_add(p, leaf, file, w);
}

static void read_pyspy(const char *path, prof_t *p) { rt_folded(path, pyspy_line, p); }

static void read_agent(const chunks_t *cs, cm_event_type_t type, prof_t *p, uint64_t *py,
                       uint64_t *interp_only) {
    for (int c = 0; c < cs->n; c++) {
        const cm_samples_t *s = &cs->c[c]->samples[type];
        const cm_dict_t *d = &cs->c[c]->dict;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t st = s->stack[i], a = d->stack_off[st], b = d->stack_off[st + 1];
            int32_t leaf = -1;
            int eval = 0;
            for (uint32_t k = a; k < b; k++) {
                if (is_py(d, d->stack_frames[k]))
                    leaf = (int32_t)k;
                else if (!strcmp(loc_fn(d, d->stack_frames[k]), "_PyEval_EvalFrameDefault"))
                    eval = 1;
            }
            if (leaf < 0) {
                *interp_only += eval;
                continue;
            }
            (*py)++;
            uint32_t lf = d->stack_frames[leaf];
            prof_add(p, loc_fn(d, lf), fn_file(d, lf), (double)s->weight[i]);
        }
    }
}

/* Our self shares (type's samples) against py-spy's; returns the largest difference over both
 * top-20s. Checks >= min_samples Python samples and >= 99 % of the interpreter's samples with
 * a Python frame. */
static double compare(const chunks_t *cs, cm_event_type_t type, const prof_t *theirs,
                      uint64_t min_samples) {
    prof_t *ours = calloc(1, sizeof *ours);
    uint64_t py = 0, interp_only = 0;
    read_agent(cs, type, ours, &py, &interp_only);
    const char *tn = type == CM_EV_CPU ? "cpu" : "wall";
    printf("# agent %s: %" PRIu64 " Python samples (%" PRIu64 " in the interpreter without a "
           "Python frame); py-spy: %.0f samples\n", tn, py, interp_only, theirs->total);
    prof_sort(ours);
    double worst = prof_worst(ours, theirs, 20, tn, "py-spy");
    CHECKF(py >= min_samples && theirs->total >= 5000, "too few samples: %" PRIu64 " / %.0f", py,
           theirs->total);
    CHECKF(py * 100 >= (py + interp_only) * 99, "%" PRIu64 " of %" PRIu64, py, py + interp_only);
    free(ours);
    return worst;
}

static void pyspy_compare(void) {
    char venv_sh[4096], script[4096], raw[4200], out[8192];
    src_path("tests/python/py-spy-venv.sh", venv_sh, sizeof venv_sh);
    src_path("tests/python/mixed.py", script, sizeof script);
    const char *vargv[] = {"/bin/sh", venv_sh, NULL};
    int st = run(NULL, vargv, 600, out, sizeof out);
    CHECKF(st == 0, "py-spy could not be installed (%d): %s", st, out);
    char pyspy[8192];
    snprintf(pyspy, sizeof pyspy, "%s", out);
    pyspy[strcspn(pyspy, "\n")] = 0;
    char *dir = mkout(), *rdir = mkout();
    snprintf(raw, sizeof raw, "%s/py-spy.txt", rdir);
    /* the agent and py-spy sample the same run of a single-threaded workload (with threads,
     * py-spy counts a thread waiting for a core as active and the agent's CPU samples do not) */
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000",
                         "FLEETPROF_WALL_HZ=1000", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_CPU_BUDGET=20",
                         "FLEETPROF_LOG_LEVEL=info", NULL};
    const char *argv[] = {pyspy, "record", "--format", "raw", "--nonblocking", "-r", "1000",
                          "-o", raw, "--", PY, script, "15", "0", NULL};
    st = run(env, argv, 120, out, sizeof out);
    CHECKF(st == 0, "py-spy record failed (%d): %s", st, out);
    prof_t *theirs = calloc(1, sizeof *theirs);
    read_pyspy(raw, theirs);
    prof_sort(theirs);
    chunks_t *cs = load(dir);
    /* wall samples: a wall sampler like py-spy, at its rate (the CPU timer fires at most HZ
     * times per CPU-second: 250 here, too few samples on a loaded machine for 3 points) */
    double worst_wall = compare(cs, CM_EV_WALL, theirs, 5000);
    double worst_cpu = compare(cs, CM_EV_CPU, theirs, 2000);
    printf("# largest difference over both top-20s: wall %.2f, cpu %.2f points\n", worst_wall,
           worst_cpu);
    CHECK(worst_wall <= 3.0);
    CHECK(worst_cpu <= 3.0);
    free(theirs);
    free_chunks(cs);
    rmrf(dir);
    rmrf(rdir);
    free(dir);
    free(rdir);
}

int main(int argc, char **argv) {
    static const rt_case_t cases[] = {{"offsets_dwarf", offsets_dwarf, 0},
                                      {"frames_and_threads", frames_and_threads, 0},
                                      {"pyspy_compare", pyspy_compare, 0}};
    return rt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
