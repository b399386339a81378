/* Names for JIT code from the process's perf map file, /tmp/perf-<pid>.map: one line per code
 * range the runtime compiled, "START SIZE NAME" (hex, hex, the rest of the line), appended as
 * code is compiled; the convention perf(1) reads, written by `node --perf-basic-prof`, by the
 * JVM (`jcmd PID Compiler.perfmap`) and by CPython 3.12+ (`-X perf`).
 *
 * The file is read incrementally: each refresh starts where the last one stopped, takes whole
 * lines only (a line being written stays for the next refresh) and at most
 * AG_PERFMAP_READ_MAX bytes; a file that shrank or was replaced (another inode: a new process
 * with our pid after a fork) is read again from its start. A line that is not "hex hex name"
 * or is longer than AG_PERFMAP_MAX_LINE is skipped and counted. Entries are kept sorted by
 * start; a later entry at the same start replaces the earlier one (code space reused after a
 * collection), and its old name's bytes are reclaimed when the name store is compacted; of
 * overlapping ranges at different starts, the newest holding a pc names it. At
 * most AG_PERFMAP_MAX_ENTRIES ranges and AG_PERFMAP_MAX_NAMES bytes of names: beyond, new
 * entries are dropped and counted.
 *
 * V8's names ("JS:*fib /srv/app.js:1:13": a tier mark ~ ^ + * and the function's script,
 * line and column; "Eval:", and the older "LazyCompile:"/"Function:") become JavaScript
 * functions: name "fib" ("(anonymous)" when empty), file and line from the location, system
 * name "js:fib /srv/app.js:1:13" (the frame's kind, for every consumer, as "python:" for
 * Python frames), one function for all tiers. Other names ("Builtin:...", "Stub:...", Java's)
 * are kept as written.
 *
 * Threads: the background thread only (the builder names frames there); no locks. */
#include "perfmap.h"

#include "ag_alloc.h"
#include "clock.h"
#include "cm/log.h"
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint64_t start;
    uint32_t size;
    uint32_t name; /* offset in ag_perfmap.names */
    uint64_t seq;  /* line number in the file: the larger, the newer */
} pm_entry_t;

static struct {
    char path[64];
    int fixed;               /* path set by ag_perfmap_use */
    uint64_t off, ino, dev;  /* next byte to read, and the file it is in */
    pm_entry_t *e;           /* sorted by start: [0, sorted), then the batch being read */
    uint32_t n, sorted, cap;
    char *names;             /* NUL-terminated names */
    uint32_t names_used, names_cap;
    uint32_t max_size; /* the largest range kept: bounds the overlap search */
    uint64_t seq;      /* lines read */
    uint64_t last_ns, missing_until_ns;
    int skip; /* inside a line longer than AG_PERFMAP_MAX_LINE: dropped up to its newline */
    ag_perfmap_stats_t st;
} ag_perfmap;

static char pm_buf[AG_PERFMAP_MAX_LINE + 65536];

static void pm_clear(void) {
    ag_perfmap.n = ag_perfmap.sorted = 0;
    ag_perfmap.names_used = ag_perfmap.max_size = 0;
    ag_perfmap.off = ag_perfmap.seq = 0;
    ag_perfmap.skip = 0;
}

void ag_perfmap_use(const char *path) {
    pm_clear();
    ag_perfmap.fixed = path != NULL;
    if (path)
        snprintf(ag_perfmap.path, sizeof ag_perfmap.path, "%s", path);
    ag_perfmap.ino = ag_perfmap.dev = 0;
    ag_perfmap.last_ns = ag_perfmap.missing_until_ns = 0;
    memset(&ag_perfmap.st, 0, sizeof ag_perfmap.st);
}

/* Rewrites the name store with the names of the kept entries only (replaced entries' names
 * go). 0, or -1 when out of memory (the old store stays). */
static int pm_compact(void) {
    char *to = malloc(ag_perfmap.names_cap ? ag_perfmap.names_cap : 1);
    if (!to)
        return -1;
    uint32_t used = 0;
    for (uint32_t i = 0; i < ag_perfmap.n; i++) {
        const char *s = ag_perfmap.names + ag_perfmap.e[i].name;
        size_t len = strlen(s) + 1;
        memcpy(to + used, s, len);
        ag_perfmap.e[i].name = used;
        used += (uint32_t)len;
    }
    free(ag_perfmap.names);
    ag_perfmap.names = to;
    ag_perfmap.names_used = used;
    return 0;
}

/* Room for len more bytes of names: grows the store, compacts it at its bound. */
static int pm_names_room(size_t len) {
    if (ag_perfmap.names_used + len <= ag_perfmap.names_cap)
        return 0;
    if (ag_perfmap.names_cap >= AG_PERFMAP_MAX_NAMES) {
        if (pm_compact() != 0 || ag_perfmap.names_used + len > ag_perfmap.names_cap)
            return -1;
        return 0;
    }
    uint32_t cap = ag_perfmap.names_cap ? ag_perfmap.names_cap * 2 : 65536;
    while (cap < ag_perfmap.names_used + len)
        cap *= 2;
    cap = cap > AG_PERFMAP_MAX_NAMES ? AG_PERFMAP_MAX_NAMES : cap;
    char *p = realloc(ag_perfmap.names, cap);
    if (!p)
        return -1;
    ag_perfmap.names = p;
    ag_perfmap.names_cap = cap;
    return ag_perfmap.names_used + len <= cap ? 0 : -1;
}

/* One line (NUL-terminated, no newline): "START SIZE NAME". */
static void pm_line(char *line) {
    char *end;
    errno = 0;
    uint64_t start = strtoull(line, &end, 16);
    if (end == line || *end != ' ' || errno) {
        ag_perfmap.st.malformed++;
        return;
    }
    char *s = end + 1;
    uint64_t size = strtoull(s, &end, 16);
    if (end == s || *end != ' ' || errno || !size || size > UINT32_MAX || !end[1] ||
        start + size < start) {
        ag_perfmap.st.malformed++;
        return;
    }
    const char *name = end + 1;
    size_t len = strlen(name) + 1;
    if (ag_perfmap.n == ag_perfmap.cap) {
        uint32_t cap = ag_perfmap.cap ? ag_perfmap.cap * 2 : 4096;
        pm_entry_t *e = cap <= AG_PERFMAP_MAX_ENTRIES ? realloc(ag_perfmap.e, cap * sizeof *e) : NULL;
        if (!e) {
            ag_perfmap.st.full++;
            return;
        }
        ag_perfmap.e = e;
        ag_perfmap.cap = cap;
    }
    if (pm_names_room(len) != 0) {
        ag_perfmap.st.full++;
        return;
    }
    memcpy(ag_perfmap.names + ag_perfmap.names_used, name, len);
    ag_perfmap.e[ag_perfmap.n++] =
        (pm_entry_t){start, (uint32_t)size, ag_perfmap.names_used, ++ag_perfmap.seq};
    if (size > ag_perfmap.max_size)
        ag_perfmap.max_size = (uint32_t)size;
    ag_perfmap.names_used += (uint32_t)len;
    ag_perfmap.st.lines++;
}

static int cmp_start(const void *a, const void *b) {
    uint64_t x = ((const pm_entry_t *)a)->start, y = ((const pm_entry_t *)b)->start;
    return x < y ? -1 : x > y;
}

/* Sorts the new batch in (a stable sort: of entries at one start the newest is last) and
 * keeps the newest entry per start. */
static void pm_merge(void) {
    if (ag_perfmap.n == ag_perfmap.sorted)
        return;
    ag_qsort(ag_perfmap.e, ag_perfmap.n, sizeof *ag_perfmap.e, cmp_start);
    uint32_t k = 0;
    for (uint32_t i = 0; i < ag_perfmap.n; i++) {
        if (k && ag_perfmap.e[k - 1].start == ag_perfmap.e[i].start)
            k--;
        ag_perfmap.e[k++] = ag_perfmap.e[i];
    }
    ag_perfmap.n = ag_perfmap.sorted = k;
}

/* The whole lines of buf[0, have); returns the bytes consumed. A line longer than
 * AG_PERFMAP_MAX_LINE is counted as malformed and skipped up to its newline (ag_perfmap.skip,
 * across reads and refreshes). */
static size_t pm_lines(char *buf, size_t have) {
    size_t at = 0;
    while (at < have) {
        char *nl = memchr(buf + at, '\n', have - at);
        if (ag_perfmap.skip) {
            ag_perfmap.skip = !nl;
            at = nl ? (size_t)(nl - buf) + 1 : have;
            continue;
        }
        if (!nl) {
            if (have - at < AG_PERFMAP_MAX_LINE)
                break; /* being written: next time */
            ag_perfmap.st.malformed++;
            ag_perfmap.skip = 1;
            return have;
        }
        *nl = '\0';
        if ((size_t)(nl - (buf + at)) >= AG_PERFMAP_MAX_LINE)
            ag_perfmap.st.malformed++;
        else
            pm_line(buf + at);
        at = (size_t)(nl - buf) + 1;
    }
    return at;
}

/* The file's new whole lines from fd, at most AG_PERFMAP_READ_MAX bytes. */
static void pm_read(int fd) {
    size_t have = 0;
    uint64_t total = 0;
    while (total < AG_PERFMAP_READ_MAX) {
        ssize_t r = pread(fd, pm_buf + have, sizeof pm_buf - have,
                          (off_t)(ag_perfmap.off + have));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t used = pm_lines(pm_buf, have);
        memmove(pm_buf, pm_buf + used, have - used);
        have -= used;
        ag_perfmap.off += used;
        total += used;
    }
    ag_perfmap.st.bytes += total;
    ag_perfmap.st.refreshes += total > 0;
}

void ag_perfmap_refresh(void) {
    uint64_t now = ag_now_mono();
    ag_perfmap.last_ns = now;
    if (now < ag_perfmap.missing_until_ns)
        return;
    if (!ag_perfmap.fixed)
        snprintf(ag_perfmap.path, sizeof ag_perfmap.path, "/tmp/perf-%d.map", (int)getpid());
    int fd = open(ag_perfmap.path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ag_perfmap.missing_until_ns = now + 1000000000ull;
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0) {
        if ((uint64_t)sb.st_ino != ag_perfmap.ino || (uint64_t)sb.st_dev != ag_perfmap.dev ||
            (uint64_t)sb.st_size < ag_perfmap.off) {
            if (ag_perfmap.ino || ag_perfmap.off)
                ag_perfmap.st.restarts++;
            pm_clear();
            ag_perfmap.ino = (uint64_t)sb.st_ino;
            ag_perfmap.dev = (uint64_t)sb.st_dev;
        }
        if ((uint64_t)sb.st_size > ag_perfmap.off) {
            uint64_t before = ag_perfmap.st.lines, bad = ag_perfmap.st.malformed;
            pm_read(fd);
            pm_merge();
            if (!before && ag_perfmap.st.lines)
                CM_INFO("perf map %s: naming JIT code from it", ag_perfmap.path);
            if (!bad && ag_perfmap.st.malformed) /* once: later ones are counted only */
                CM_INFO("perf map %s: %llu lines skipped: not \"START SIZE NAME\" (hex, hex, "
                        "text) or over %u bytes", ag_perfmap.path,
                        (unsigned long long)ag_perfmap.st.malformed, AG_PERFMAP_MAX_LINE);
        }
    }
    close(fd);
    ag_perfmap.st.entries = ag_perfmap.n;
}

/* V8's "JS:*fib /srv/app.js:1:13" -> name, file, line (static buffers, bg thread). */
static int pm_js(const char *raw, ag_jitsym_t *out) {
    static const char *const kinds[] = {"JS:", "Eval:", "LazyCompile:", "Function:", "Script:"};
    static char name[512], file[AG_PERFMAP_MAX_LINE], sys[AG_PERFMAP_MAX_LINE + 8];
    const char *p = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !p; i++)
        if (!strncmp(raw, kinds[i], strlen(kinds[i])))
            p = raw + strlen(kinds[i]);
    if (!p)
        return 0;
    if (*p && strchr("~^+*-", *p))
        p++; /* the tier: interpreted, baseline, mid-tier, optimised */
    const char *sp = strchr(p, ' ');
    size_t nlen = sp ? (size_t)(sp - p) : strlen(p);
    if (nlen >= sizeof name)
        nlen = sizeof name - 1;
    if (nlen)
        memcpy(name, p, nlen);
    else
        memcpy(name, "(anonymous)", (nlen = 11));
    name[nlen] = '\0';
    out->file = NULL;
    out->line = 0;
    if (sp && sp[1]) { /* "file:line:col" (file may hold colons: a URL) */
        snprintf(file, sizeof file, "%s", sp + 1);
        char *c2 = strrchr(file, ':');
        char *c1 = c2 ? c2 - 1 : NULL;
        while (c1 && c1 > file && *c1 != ':')
            c1--;
        if (c1 && c1 > file && *c1 == ':') {
            out->line = (uint32_t)strtoul(c1 + 1, NULL, 10);
            *c1 = '\0';
        }
        out->file = file;
    }
    snprintf(sys, sizeof sys, "js:%s", p);
    out->name = name;
    out->sysname = sys;
    out->key = XXH3_64bits_withSeed(sys, strlen(sys), 0x6a73);
    return 1;
}

/* The newest entry holding pc, or NULL. Ranges overlap when code space was reused (the old
 * entry stays in the file): among those that start within max_size below pc (at most 64). */
static const pm_entry_t *pm_find(uintptr_t pc) {
    uint32_t lo = 0, hi = ag_perfmap.n;
    while (lo < hi) { /* first entry with start > pc */
        uint32_t mid = (lo + hi) / 2;
        if (ag_perfmap.e[mid].start <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    const pm_entry_t *best = NULL;
    for (uint32_t i = lo, k = 0; i-- > 0 && k < 64; k++) {
        const pm_entry_t *e = &ag_perfmap.e[i];
        if (pc - e->start >= ag_perfmap.max_size)
            break;
        if (pc - e->start < e->size && (!best || e->seq > best->seq))
            best = e;
    }
    return best;
}

int ag_perfmap_lookup(uintptr_t pc, ag_jitsym_t *out) {
    uint64_t age = ag_now_mono() - ag_perfmap.last_ns;
    if (age > 100000000ull)
        ag_perfmap_refresh();
    const pm_entry_t *best = pm_find(pc);
    /* The runtime writes a range's line before its code runs, so a pc sampled before now is
     * in the file now: a miss reads what it grew by (at most once a millisecond), since the
     * builder keeps a location's name for the rest of the chunk. */
    if (!best && age > 1000000ull && age <= 100000000ull) {
        ag_perfmap_refresh();
        best = pm_find(pc);
    }
    if (!best)
        return 0;
    const char *raw = ag_perfmap.names + best->name;
    if (pm_js(raw, out))
        return 1;
    out->name = out->sysname = raw;
    out->file = NULL;
    out->line = 0;
    out->key = XXH3_64bits_withSeed(raw, strlen(raw), 0x706d);
    return 1;
}

void ag_perfmap_stats(ag_perfmap_stats_t *st) { *st = ag_perfmap.st; }
