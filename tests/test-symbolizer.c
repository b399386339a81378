/* The server-side symbolizer against hostile debuginfod servers
 * (aggregator/src/symbols/symbolizer.c, issue 28 finding 6): a stub debuginfod of our own on
 * 127.0.0.1 (a thread answering
 * GET /buildid/HEX/debuginfo) serves a small shared object whose DWARF nests 300,000
 * namespaces around its one function. Asserted: a file over debuginfod-max-size is refused
 * (announced size or not) and not kept; the deep DIEs are walked without exhausting the stack;
 * a slow download holds up no lookup of another build id; the files kept stay within
 * debuginfod-cache-size (the least recently used one closed, deleted and fetched again).
 * Each test runs in its own child with a symbolizer and a stub of its own. */
#include "aggtest.h"
#include "symbolizer.h"
#include "support/runner.h"

#include <inttypes.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define NEST 300000

typedef struct {
    char path[128];
    off_t size;
} so_t;

static char dir[64], url[64];
static uint64_t fn_addr;  /* deep_fn's address, the same in both files */
static so_t deep, flat;   /* NEST nested namespaces around deep_fn, or one */

/* ---- the stub debuginfod ---- */

enum { SIZED, UNSIZED, SLOW, MISSING };
typedef struct {
    uint8_t bid[20];
    int mode;
    const so_t *so; /* what it serves */
    int requests;   /* answered so far */
} stub_bid_t;

static stub_bid_t stub[8];
static int stub_fd;
static char stub_maxsize[64]; /* the last request's X-DEBUGINFOD-MAXSIZE value ("" if none) */
static pthread_mutex_t stub_mu = PTHREAD_MUTEX_INITIALIZER;

static void hex(const uint8_t *b, char *out) {
    for (int i = 0; i < 20; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/* Answers one request on c: the shared object for a known build id (as its mode says), 404
 * otherwise. */
static void stub_answer(int c) {
    char req[4096] = "";
    size_t n = 0;
    while (n < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
        ssize_t r = read(c, req + n, sizeof req - 1 - n);
        if (r <= 0)
            return;
        n += (size_t)r;
        req[n] = 0;
    }
    stub_bid_t *b = NULL;
    char h[41];
    pthread_mutex_lock(&stub_mu);
    for (size_t i = 0; i < sizeof stub / sizeof *stub; i++) {
        hex(stub[i].bid, h);
        if (stub[i].bid[0] && strstr(req, h) && strstr(req, "/debuginfo"))
            b = &stub[i];
    }
    int mode = b ? b->mode : MISSING;
    const so_t *so = b ? b->so : NULL;
    if (getenv("STUB_DEBUG"))
        fprintf(stderr, "stub: %.*s -> mode %d\n", (int)strcspn(req, "\r"), req, mode);
    if (b)
        b->requests++;
    const char *mx = strstr(req, "\r\nX-DEBUGINFOD-MAXSIZE: ");
    snprintf(stub_maxsize, sizeof stub_maxsize, "%.*s", mx ? (int)strcspn(mx + 24, "\r") : 0,
             mx ? mx + 24 : "");
    pthread_mutex_unlock(&stub_mu);
    if (mode == MISSING) {
        dprintf(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    }
    if (mode == SLOW)
        at_sleep_ms(2000);
    if (mode == UNSIZED) /* the end of the body is the end of the connection */
        dprintf(c, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\n");
    else
        dprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\nConnection: close\r\n\r\n",
                (long long)so->size);
    FILE *f = fopen(so->path, "rb");
    char buf[65536];
    size_t k;
    while (f && (k = fread(buf, 1, sizeof buf, f)) > 0)
        if (write(c, buf, k) != (ssize_t)k)
            break;
    if (f)
        fclose(f);
}

static void *stub_main(void *arg) {
    (void)arg;
    for (;;) {
        int c = accept(stub_fd, NULL, NULL);
        if (c < 0)
            return NULL;
        stub_answer(c);
        close(c);
    }
}

static void stub_start(void) {
    stub_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t l = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(stub_fd >= 0 && bind(stub_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(stub_fd, 64) == 0 && getsockname(stub_fd, (struct sockaddr *)&a, &l) == 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stub_main, NULL) == 0);
    pthread_detach(t);
}

/* Registers build id number k (its bytes all k + 1) serving so with a mode; returns it. */
static stub_bid_t *stub_add(int k, int mode, const so_t *so) {
    pthread_mutex_lock(&stub_mu);
    stub_bid_t *b = &stub[k];
    memset(b->bid, k + 1, sizeof b->bid);
    b->mode = mode;
    b->so = so;
    b->requests = 0;
    pthread_mutex_unlock(&stub_mu);
    return b;
}

static int stub_requests(const stub_bid_t *b) {
    pthread_mutex_lock(&stub_mu);
    int n = b->requests;
    pthread_mutex_unlock(&stub_mu);
    return n;
}

/* ---- the served file: a shared object, deep_fn inside NEST nested namespaces ---- */

static void make_so(so_t *so, const char *name, int nest) {
    char src[128], cmd[512];
    snprintf(src, sizeof src, "%s/%s.s", dir, name);
    snprintf(so->path, sizeof so->path, "%s/%s.so", dir, name);
    FILE *f = fopen(src, "w");
    CHECK(f != NULL);
    fprintf(f, "\t.text\n\t.globl deep_fn\n\t.type deep_fn, @function\ndeep_fn:\n\tret\n"
               "\t.fill 15, 1, 0x90\n\t.size deep_fn, 16\n"
               /* abbrevs: 1 CU (low_pc, high_pc, name), 2 namespace, 3 subprogram */
               "\t.section .debug_abbrev,\"\",@progbits\n"
               "\t.uleb128 1, 0x11\n\t.byte 1\n\t.uleb128 0x11, 0x01, 0x12, 0x07, 0x03, 0x08\n"
               "\t.byte 0, 0\n\t.uleb128 2, 0x39\n\t.byte 1, 0, 0\n"
               "\t.uleb128 3, 0x2e\n\t.byte 0\n\t.uleb128 0x03, 0x08, 0x11, 0x01, 0x12, 0x07\n"
               "\t.byte 0, 0, 0\n"
               "\t.section .debug_info,\"\",@progbits\n"
               "\t.long .Lend - .Lbody\n.Lbody:\n\t.value 4\n\t.long 0\n\t.byte 8\n"
               "\t.uleb128 1\n\t.quad deep_fn\n\t.quad 16\n\t.string \"deep.c\"\n"
               "\t.rept %d\n\t.uleb128 2\n\t.endr\n"
               "\t.uleb128 3\n\t.string \"deep_fn\"\n\t.quad deep_fn\n\t.quad 16\n"
               "\t.rept %d\n\t.byte 0\n\t.endr\n\t.byte 0\n.Lend:\n"
               "\t.section .debug_aranges,\"\",@progbits\n"
               "\t.long .Laend - .Labody\n.Labody:\n\t.value 2\n\t.long 0\n\t.byte 8, 0\n"
               "\t.long 0\n\t.quad deep_fn\n\t.quad 16\n\t.quad 0\n\t.quad 0\n.Laend:\n",
            nest, nest);
    CHECK(fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "cc -shared -nostdlib -Wl,--build-id -o %s %s", so->path, src);
    CHECKF(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "nm %s | awk '$3 == \"deep_fn\" {print $1}'", so->path);
    FILE *p = popen(cmd, "r");
    CHECK(p && fscanf(p, "%" SCNx64, &fn_addr) == 1);
    pclose(p);
    struct stat st;
    CHECK(stat(so->path, &st) == 0);
    so->size = st.st_size;
}

/* A symbolizer on the stub (started in this test's child: it serves what the test added) with
 * a fresh download cache. */
static void init(uint64_t max_size, uint64_t cache_bytes) {
    static int n;
    if (!stub_fd)
        stub_start();
    char cache[128];
    snprintf(cache, sizeof cache, "%s/cache-%d-%d", dir, (int)getpid(), n++);
    agg_symbolizer_cfg_t cfg = {url, cache, 5, 60, max_size, cache_bytes};
    CHECK(agg_symbolizer_init(&cfg) == 0);
}

static int cached(const stub_bid_t *b) {
    char h[41], path[256];
    hex(b->bid, h);
    snprintf(path, sizeof path, "%s/cache-%d-0/%s/debuginfo", dir, (int)getpid(), h);
    struct stat sb;
    return stat(path, &sb) == 0 && sb.st_size > 0; /* an empty file: a negative entry */
}

static int ask(const stub_bid_t *b, agg_sym_t *s) {
    return agg_symbolize(b->bid, sizeof b->bid, fn_addr + 4, s);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- tests ---- */

/* A file over debuginfod-max-size is refused, whether the server announces its size or not,
 * and not left in the cache; under the bound the same file names the function. */
static void test_too_big(void) {
    stub_bid_t *sized = stub_add(0, SIZED, &deep), *unsized = stub_add(1, UNSIZED, &deep);
    init(64 << 10, 0); /* the file is ~0.6 MB */
    agg_sym_t s;
    CHECK_EQ(ask(sized, &s), -1);
    CHECK_EQ(ask(unsized, &s), -1);
    agg_symbolizer_stats_t st;
    agg_symbolizer_stats(&st);
    CHECK_EQ(st.too_big, 2);
    CHECK(!cached(sized) && !cached(unsized));
    /* the bound reached the server per client, not through a setenv at run time */
    pthread_mutex_lock(&stub_mu);
    CHECKF(!strcmp(stub_maxsize, "65536"), "X-DEBUGINFOD-MAXSIZE: '%s'", stub_maxsize);
    pthread_mutex_unlock(&stub_mu);
    CHECK(getenv("DEBUGINFOD_MAXSIZE") == NULL);
    agg_symbolizer_shutdown();
    init(0, 0); /* the default, 512 MiB */
    CHECK_EQ(ask(unsized, &s), 1);
    CHECK(!strcmp(s.name, "deep_fn"));
    agg_sym_free(&s);
    agg_symbolizer_shutdown();
}

/* 300,000 nested namespace DIEs: named from the symbol table, no stack overflow (the walk
 * stops at 64 levels of namespaces). Before: descend() recursed once per level. */
static void test_deep_dies(void) {
    stub_bid_t *b = stub_add(2, SIZED, &deep);
    init(0, 0);
    agg_sym_t s;
    CHECK_EQ(ask(b, &s), 1);
    CHECK(!strcmp(s.name, "deep_fn") && s.chain == NULL);
    agg_sym_free(&s);
    agg_symbolizer_shutdown();
}

typedef struct {
    const stub_bid_t *b;
    int rc;
    double secs;
} asker_t;

static void *asker(void *arg) {
    asker_t *a = arg;
    agg_sym_t s;
    double t0 = now_s();
    a->rc = ask(a->b, &s);
    a->secs = now_s() - t0;
    agg_sym_free(&s);
    return NULL;
}

/* A download that takes 2 s holds up no lookup of a build id already loaded (before: one lock
 * held across every download stalled every query behind it). */
static void test_no_stall(void) {
    stub_bid_t *fast = stub_add(3, SIZED, &flat), *slow = stub_add(4, SLOW, &flat);
    init(0, 0);
    agg_sym_t s;
    CHECK_EQ(ask(fast, &s), 1);
    agg_sym_free(&s);
    asker_t a = {slow, 0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, asker, &a) == 0);
    at_sleep_ms(300); /* the slow download is under way */
    CHECK_EQ(stub_requests(slow), 1);
    double t0 = now_s();
    CHECK_EQ(ask(fast, &s), 1);
    double secs = now_s() - t0;
    agg_sym_free(&s);
    CHECKF(secs < 0.1, "a loaded build id answered after %.3f s", secs);
    pthread_join(t, NULL);
    CHECKF(a.rc == 1 && a.secs > 1.5, "slow one: %d after %.3f s", a.rc, a.secs);
    agg_symbolizer_shutdown();
}

/* debuginfod-cache-size holds two files: the third closes the least recently used one and
 * deletes its download; asked again, it is fetched again. */
static void test_cache_bound(void) {
    stub_bid_t *b[3] = {stub_add(5, SIZED, &flat), stub_add(6, SIZED, &flat),
                        stub_add(7, SIZED, &flat)};
    init(0, (uint64_t)flat.size * 5 / 2);
    agg_sym_t s;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(ask(b[i], &s), 1);
        agg_sym_free(&s);
    }
    agg_symbolizer_stats_t st;
    agg_symbolizer_stats(&st);
    CHECK_EQ(st.evicted, 1);
    CHECK(!cached(b[0]) && cached(b[1]) && cached(b[2]));
    CHECK_EQ(ask(b[0], &s), 1);
    agg_sym_free(&s);
    CHECK_EQ(stub_requests(b[0]), 2);
    agg_symbolizer_stats(&st);
    CHECK(st.evicted == 2 && !cached(b[1]));
    agg_symbolizer_shutdown();
}

static const tr_test_t tests[] = {
    {"too_big", test_too_big},
    {"deep_dies", test_deep_dies},
    {"no_stall", test_no_stall},
    {"cache_bound", test_cache_bound},
    {0},
};

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN); /* the stub writes to clients that hang up on purpose */
    snprintf(dir, sizeof dir, "/tmp/fp-symbolizer-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    make_so(&deep, "deep", NEST);
    make_so(&flat, "flat", 1);
    int rc = tr_main(tests, argc, argv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
    return rc;
}
