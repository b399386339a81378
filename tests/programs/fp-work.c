/* Workloads run under the agent by tests/test-agent.c and bench/bench-agent.c.
 *
 *   fp-work cpu SECS            burn_a and burn_b alternate, b doing 3x a's work (1:3 split),
 *                               until the process has used SECS of CPU (not wall) time, so
 *                               the sample count does not depend on the machine's load
 *   fp-work cpuwall SECS        the same for SECS of wall time
 *   fp-work threads N SECS      N threads in burn_thread
 *   fp-work wall SECS           main burns in burn_a; a second thread sleeps in sleep_here
 *   (modes other than cpuwall, wall, threads and step count SECS in CPU time, so that sample
 *   counts do not depend on the machine's load)
 *   fp-work span SECS           span_a under trace A, span_b under trace B (1:1), labels too
 *   fp-work step S1 S2 N        1 burning thread for S1 s, then N threads for S2 s
 *   fp-work fork SECS           burns, forks; the child burns in child_work; both exit 0
 *   fp-work exec SECS           execs itself as "cpu SECS" (profile must follow the exec)
 *   fp-work forever             burns in burn_forever until killed (SIGTERM test)
 *   fp-work chain SECS          installs handlers for every candidate RT signal after start,
 *                               sends each to itself, checks every one ran, then burns
 *   fp-work deep DEPTH SECS     burns at the bottom of a DEPTH-deep recursion
 *   fp-work fixed ITERS N       N threads each run ITERS x 200k iterations of burn_a+burn_b
 *                               (a fixed amount of work, for overhead benchmarks)
 *   fp-work api SECS            checks the API's argument handling (prints api_errors=N), then
 *                               burns in span_a under a context set from a traceparent
 *   fp-work flush               burns 0.3 s, counts 1000 units of work, calls
 *                               fleetprof_flush(), prints its result, counts 234 units, burns
 *                               0.3 s more
 *   fp-work cpu4 SECS           4 threads each alternate burn_a/burn_b (1:3), no system
 *                               calls, until the process has used SECS of CPU
 *   fp-work statfd              thread "half" burns 3 ms, sleeps 7 ms (a raw nanosleep system
 *                               call, which no hook marks) for 3 s; after 1.5 s main counts the
 *                               descriptors open on /proc/.../task/.../stat (cached=), closes
 *                               them as a program closing descriptors it did not open would,
 *                               opens a file of its own in their place and, once half is gone
 *                               and up to 3 s more have passed, checks that file (app_fd_ok=)
 *                               and counts the stat descriptors left (leftover=)
 *   fp-work blockread SECS      thread "reader" blocks in read() on a pipe nobody writes to
 *                               (in block_in_read) while main burns SECS of wall time
 *   fp-work churn N WAVE        N short-lived threads (churn_thread, ~2 ms CPU each), WAVE at
 *                               a time, each wave joined before the next
 *   fp-work idlecpu IDLE SECS   sleeps IDLE s (an idle service), prints load=<CLOCK_REALTIME ns>,
 *                               then burns SECS of CPU as "cpu" does
 *   fp-work sigprof SECS        its own SIGPROF handler + setitimer(ITIMER_PROF, 10 ms); burns
 *                               SECS of CPU; prints sigprof=<deliveries>
 *   fp-work step3 S N           1 burning thread for S s, N for S s, 1 for S s (wall time);
 *                               prints step1=/step2= (CLOCK_REALTIME ns of the steps)
 *   fp-work bursty SECS         2 threads: short CPU bursts (0.2-2 ms) between sleeps
 *                               (0.5-3 ms), until the process has used SECS of CPU
 *   fp-work span2 SECS          threads "span0" and "span1" each alternate span_a (trace
 *                               0xa0+i, span 0x1a+i) and span_b (0xb0+i, 0x2b+i) until the
 *                               process has used SECS of CPU
 *   fp-work requests N          N requests on main, alternately "GET /fast" (span_a, 0.2 ms
 *                               of wall time) and "GET /slow" (span_b, 5 ms, with a nested
 *                               "db query" span in child_work), each begun from a traceparent
 *                               with trace id byte 15 = request number % 256 and span id byte
 *                               7 = 1 (the db query: 2); meanwhile thread "stuck" holds "GET
 *                               /stuck" (trace 0x57..) open; after N/2 requests it flushes, then
 *                               the stuck span ends. Prints api_errors=, fast_n=, fast_ns=,
 *                               slow_n=, slow_ns= (durations measured around begin/end)
 *   fp-work quietspans N        N spans begun and ended at once on main (no work: no sample),
 *                               named from one buffer rewritten in place ("GET /q0", "GET /q1",
 *                               "GET /q2" in turn), then exits; prints api_errors=
 *   fp-work status              prints sigcgt=<SigCgt hex> and agent_threads=<threads named
 *                               "fleetprof"> (FLEETPROF_ENABLED=0 check)
 *
 * Prints "cpu_ns=<process CPU>", "rusage_ns=<user+sys CPU from getrusage>" and
 * "rss_kb=<peak RSS>" at the end. Calls the agent's API
 * through dlsym, so the same
 * source works linked to libfleetprof or under LD_PRELOAD or without the agent.
 * Built with frame pointers and without inlining of the named functions.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static __thread volatile uint64_t sink; /* per thread: the workload has no data races */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

NOINLINE static void spin(uint64_t n) {
    uint64_t x = sink;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

NOINLINE void burn_a(uint64_t n) { spin(n); __asm__ volatile("" ::: "memory"); }
NOINLINE void burn_b(uint64_t n) { spin(3 * n); __asm__ volatile("" ::: "memory"); }
NOINLINE void span_a(uint64_t n) { spin(n); __asm__ volatile("" ::: "memory"); }
NOINLINE void span_b(uint64_t n) { spin(n); __asm__ volatile("" ::: "memory"); }
NOINLINE void child_work(uint64_t n) { spin(n); __asm__ volatile("" ::: "memory"); }
NOINLINE void burn_forever(void) {
    for (;;)
        spin(100000);
}

static volatile int g_eintr;
/* Sleeps secs in total, resuming after EINTR the way careful programs do; counts the EINTRs
 * (a wall-clock profiler's signals cause them: the test bounds how many). */
NOINLINE void sleep_here(double secs) {
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)}, rem;
    while (nanosleep(&ts, &rem) != 0) {
        g_eintr++;
        ts = rem;
    }
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void burn_for(double secs) {
    double end = now_s() + secs;
    while (now_s() < end) {
        burn_a(200000);
        burn_b(200000);
    }
}

/* A signal handler of the program's own on an alternate stack (as V8's profiler and Go's
 * runtime run theirs), doing the work: samples land on the alternate stack. */
NOINLINE void altstack_work(void) { spin(200000); __asm__ volatile("" ::: "memory"); }
static void altstack_handler(int sig) {
    (void)sig;
    altstack_work();
}
NOINLINE static void altstack_raise(double secs) {
    static char stk[1 << 16];
    stack_t ss = {.ss_sp = stk, .ss_size = sizeof stk};
    struct sigaction sa = {0};
    sa.sa_handler = altstack_handler;
    sa.sa_flags = SA_ONSTACK;
    if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0)
        exit(3);
    uint64_t end = cpu_ns() + (uint64_t)(secs * 1e9);
    while (cpu_ns() < end)
        raise(SIGUSR2);
}

NOINLINE static void burn_for_cpu(double secs) {
    uint64_t end = cpu_ns() + (uint64_t)(secs * 1e9);
    while (cpu_ns() < end) {
        burn_a(200000);
        burn_b(200000);
    }
}

static double g_secs;
static long g_iters;
NOINLINE static void *fixed_thread(void *arg) {
    (void)arg;
    for (long i = 0; i < g_iters; i++) {
        burn_a(200000);
        burn_b(200000);
    }
    return NULL;
}

static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}
NOINLINE static void *burn_thread(void *arg) {
    (void)arg;
    double end = now_s() + g_secs;
    while (now_s() < end)
        spin(200000);
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    sleep_here(g_secs);
    return NULL;
}

static void run_threads(int n, double secs) {
    pthread_t th[256];
    g_secs = secs;
    if (n > 256)
        n = 256;
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, burn_thread, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

NOINLINE int recurse(int depth, double secs) {
    if (depth <= 1) {
        burn_for_cpu(secs);
        return 0;
    }
    return recurse(depth - 1, secs) + (int)(sink & 0);
}


/* ---- cpu4, blockread, churn, sigprof, step3, bursty, status ---- */

static uint64_t g_cpu_end;
/* Random chunk sizes (the ratio stays 1:3 in every iteration): a fixed-length loop would be
 * periodic, and the kernel checks CPU timers on its 4 ms tick, so samples could alias with it
 * and land on the same phase of the loop again and again (seen as 22-28% for burn_a).
 * The threads make no system call: main watches the process CPU clock and raises a flag. A
 * system call in the loop (the process CPU clock read every 8 iterations, as this mode first
 * did) is where the scheduler preempts a thread whose slice ran out (update_curr runs in it),
 * and the code after such a point is under-sampled by every CPU-timer profiler: agent
 * README, "CPU-timer sampling and preemption points". */
static atomic_int g_cpu4_stop;
NOINLINE static void *cpu4_thread(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!atomic_load_explicit(&g_cpu4_stop, memory_order_relaxed)) {
        for (int i = 0; i < 8; i++) {
            uint64_t n = 50000 + (uint64_t)(rand_r(&seed) % 300000);
            burn_a(n);
            burn_b(n);
        }
    }
    return NULL;
}

static atomic_int g_half_stop;
NOINLINE static void *half(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "half");
    while (!g_half_stop) {
        burn_for(0.003);
        struct timespec ts = {0, 7000000};
        syscall(SYS_nanosleep, &ts, NULL); /* EINTR from a wall signal is fine here */
    }
    return NULL;
}

/* Descriptors of this process open on a thread's /proc stat file; their numbers into fds. */
static int stat_fds(int *fds, int max) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        if (strstr(target, "/task/") && strstr(target, "/stat") && n < max)
            fds[n++] = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

static void statfd_mode(void) {
    pthread_t th;
    pthread_create(&th, NULL, half, NULL);
    sleep_here(1.5);
    int fds[64], n = stat_fds(fds, 64), mine = -1;
    char tmpl[] = "/tmp/fp-work-statfd-XXXXXX";
    for (int i = 0; i < n; i++)
        close(fds[i]);
    if (n > 0) { /* the lowest free number: one of those just closed */
        mine = mkstemp(tmpl);
        unlink(tmpl);
        if (mine < 0 || write(mine, "mine", 4) != 4)
            exit(9);
    }
    sleep_here(1.5);
    g_half_stop = 1;
    pthread_join(th, NULL);
    /* the agent's /proc scan closes what the thread left: every 0.5 s, up to 2 s apart while
     * the agent is over its budget (agent README); waited for up to 3 s, the wait printed */
    int left = 0;
    double waited = 0;
    while (waited < 3.0) {
        sleep_here(0.1);
        waited += 0.1;
        if ((left = stat_fds(fds + n, 64 - n)) == 0)
            break;
    }
    char buf[8] = "";
    int ok = mine >= 0 && fcntl(mine, F_GETFD) >= 0 && pread(mine, buf, 4, 0) == 4 &&
             !memcmp(buf, "mine", 4);
    int was = -1;
    for (int i = 0; i < n; i++)
        if (fds[i] == mine)
            was = mine;
    printf("cached=%d app_fd=%d reused=%d app_fd_ok=%d leftover=%d closed_after=%.1fs\n", n,
           mine, was >= 0, ok, left, waited);
}

static int g_pipe[2];
/* Blocks in read() until the write end is closed (nobody ever writes). */
NOINLINE ssize_t block_in_read(int fd) {
    char c;
    ssize_t n = read(fd, &c, 1);
    __asm__ volatile("" ::: "memory");
    return n;
}
static void *reader(void *arg) {
    (void)arg;
    block_in_read(g_pipe[0]);
    return NULL;
}

NOINLINE static void *churn_thread(void *arg) {
    (void)arg;
    uint64_t end = 0;
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    end = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 2000000;
    for (;;) {
        spin(20000);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        if ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec >= end)
            break;
    }
    return NULL;
}

static volatile sig_atomic_t g_sigprof;
static void sigprof_handler(int sig) {
    (void)sig;
    g_sigprof++;
}

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One request: a CPU burst in bursty_work, then a sleep (open loop, like a service). */
NOINLINE void bursty_work(uint64_t n) { spin(n); __asm__ volatile("" ::: "memory"); }
NOINLINE static void *bursty_thread(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (cpu_ns() < g_cpu_end) {
        bursty_work(20000 + (uint64_t)(rand_r(&seed) % 200000));
        struct timespec ts = {0, 500000 + (long)(rand_r(&seed) % 2500000)};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int agent_threads(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) && !strncmp(comm, "fleetprof", 9))
            n++;
        fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static void (*g_span_set)(const uint8_t *, const uint8_t *);
NOINLINE static void *span2_thread(void *arg) {
    int i = (int)(uintptr_t)arg;
    uint8_t ta[16], tb[16], sa[8], sb[8];
    memset(ta, 0xa0 + i, 16);
    memset(tb, 0xb0 + i, 16);
    memset(sa, 0x1a + i, 8);
    memset(sb, 0x2b + i, 8);
    while (cpu_ns() < g_cpu_end) {
        g_span_set(ta, sa);
        span_a(100000);
        g_span_set(tb, sb);
        span_b(100000);
    }
    return NULL;
}

static volatile int g_chain_hits[128];
static void chain_handler(int sig) { g_chain_hits[sig]++; }

typedef int (*begin_fn)(const char *, const char *);
static begin_fn g_begin;
static int (*g_end)(void);
static atomic_int g_stuck_go, g_stuck_end;

static void *stuck_thread(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "stuck");
    g_begin("00-57575757575757575757575757575757-5757575757575757-01", "GET /stuck");
    atomic_store(&g_stuck_go, 1);
    while (!atomic_load(&g_stuck_end)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    g_end();
    return NULL;
}

/* Burns in fn until us microseconds of wall time have passed. */
static void burn_wall_us(void (*fn)(uint64_t), uint64_t us) {
    uint64_t end = real_ns() + us * 1000;
    while (real_ns() < end)
        fn(2000);
}

static int requests_mode(int n) {
    g_begin = (begin_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_begin");
    g_end = (int (*)(void))dlsym(RTLD_DEFAULT, "fleetprof_span_end");
    int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fleetprof_flush");
    if (!g_begin || !g_end || !flush)
        return 9;
    int errors = g_begin("00-zz", "bad") != -EINVAL;
    errors += g_begin("00-00000000000000000000000000000000-0000000000000001-01", "x") != -EINVAL;
    errors += g_end() != -ENOENT;
    pthread_t th;
    pthread_create(&th, NULL, stuck_thread, NULL);
    while (!atomic_load(&g_stuck_go))
        sched_yield();
    uint64_t ns[2] = {0, 0};
    int cnt[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        char tp[64];
        int slow = i % 2;
        snprintf(tp, sizeof tp, "00-%030x%02x-00000000000000%02x-01", 0xabcdef, i % 256, 1);
        uint64_t t0 = real_ns();
        errors += g_begin(tp, slow ? "GET /slow" : "GET /fast") != 0;
        if (slow) {
            burn_wall_us(span_b, 4000);
            tp[51] = '2';
            errors += g_begin(tp, "db query") != 0;
            burn_wall_us(child_work, 1000);
            errors += g_end() != 0;
        } else {
            burn_wall_us(span_a, 200);
        }
        errors += g_end() != 0;
        ns[slow] += real_ns() - t0;
        cnt[slow]++;
        if (i == n / 2)
            errors += flush() != 0;
    }
    atomic_store(&g_stuck_end, 1);
    pthread_join(th, NULL);
    printf("api_errors=%d\nfast_n=%d\nfast_ns=%llu\nslow_n=%d\nslow_ns=%llu\n", errors, cnt[0],
           (unsigned long long)ns[0], cnt[1], (unsigned long long)ns[1]);
    return 0;
}

/* Spans and nothing else: the exit chunk must still carry them. The name's buffer is rewritten
 * between calls: an agent caching names by address must still see each name. */
static int quietspans_mode(int n) {
    g_begin = (begin_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_begin");
    g_end = (int (*)(void))dlsym(RTLD_DEFAULT, "fleetprof_span_end");
    if (!g_begin || !g_end)
        return 9;
    char name[16];
    int errors = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "GET /q%d", i % 3);
        errors += g_begin("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", name) != 0;
        errors += g_end() != 0;
    }
    printf("api_errors=%d\n", errors);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    double secs = argc > 2 ? atof(argv[2]) : 1;
    void (*span_set)(const uint8_t *, const uint8_t *) =
        (void (*)(const uint8_t *, const uint8_t *))dlsym(RTLD_DEFAULT, "fleetprof_span_set");
    int (*label_set)(const char *, const char *) =
        (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "fleetprof_label_set");
    int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fleetprof_flush");

    if (!strcmp(mode, "cpu")) {
        burn_for_cpu(secs);
    } else if (!strcmp(mode, "altstack")) {
        altstack_raise(secs);
    } else if (!strcmp(mode, "cpuwall")) {
        burn_for(secs);
    } else if (!strcmp(mode, "threads") && argc > 3) {
        run_threads(atoi(argv[2]), atof(argv[3]));
    } else if (!strcmp(mode, "wall")) {
        pthread_t th;
        g_secs = secs;
        pthread_create(&th, NULL, sleeper, NULL);
        pthread_setname_np(th, "sleeper");
        burn_for(secs);
        pthread_join(th, NULL);
        printf("eintr=%d\n", g_eintr);
    } else if (!strcmp(mode, "span")) {
        if (!span_set || !label_set)
            return 3;
        uint8_t ta[16], tb[16], sa[8], sb[8];
        memset(ta, 0xaa, 16);
        memset(tb, 0xbb, 16);
        memset(sa, 0x1a, 8);
        memset(sb, 0x1b, 8);
        uint64_t end = cpu_ns() + (uint64_t)(secs * 1e9); /* CPU time: load-independent */
        while (cpu_ns() < end) {
            span_set(ta, sa);
            label_set("endpoint", "/a");
            span_a(300000);
            span_set(tb, sb);
            label_set("endpoint", "/b");
            span_b(300000);
        }
    } else if (!strcmp(mode, "step") && argc > 4) {
        burn_for(secs);
        run_threads(atoi(argv[4]), atof(argv[3]));
    } else if (!strcmp(mode, "fork")) {
        burn_for_cpu(secs / 2);
        pid_t pid = fork();
        if (pid == 0) {
            uint64_t end = cpu_ns() + (uint64_t)(secs * 1e9); /* the child's own CPU time */
            while (cpu_ns() < end)
                child_work(200000);
            exit(0);
        }
        burn_for_cpu(secs);
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 4;
    } else if (!strcmp(mode, "exec")) {
        char *args[] = {argv[0], "cpu", argv[2], NULL};
        execv("/proc/self/exe", args);
        return 5;
    } else if (!strcmp(mode, "forever")) {
        printf("ready\n");
        fflush(stdout);
        burn_forever();
    } else if (!strcmp(mode, "chain")) {
        int ok = 1;
        for (int s = SIGRTMIN + 2; s <= SIGRTMAX - 3; s++)
            signal(s, chain_handler);
        for (int s = SIGRTMIN + 2; s <= SIGRTMAX - 3; s++) {
            raise(s);
            if (g_chain_hits[s] != 1) {
                fprintf(stderr, "fp-work: handler for signal %d ran %d times\n", s,
                        g_chain_hits[s]);
                ok = 0;
            }
        }
        burn_for_cpu(secs);
        if (!ok)
            return 6;
    } else if (!strcmp(mode, "deep") && argc > 3) {
        recurse(atoi(argv[2]), atof(argv[3]));
    } else if (!strcmp(mode, "fixed") && argc > 3) {
        pthread_t th[64];
        int n = atoi(argv[3]);
        g_iters = atol(argv[2]);
        for (int i = 0; i < n && i < 64; i++)
            pthread_create(&th[i], NULL, fixed_thread, NULL);
        for (int i = 0; i < n && i < 64; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "api")) {
        int (*tp)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT,
                                                               "fleetprof_span_set_traceparent");
        int (*lclear)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT,
                                                                   "fleetprof_label_clear");
        if (!tp || !label_set || !lclear)
            return 3;
        int errors = 0;
        static const char *bad[] = {
            "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",     /* no flags */
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",   /* short flags */
            "00-0af7651916cd43dd8448eb211c80319X-b7ad6b7169203331-01",  /* bad hex */
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",  /* zero trace */
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  /* zero span */
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  /* version ff */
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", /* v00 + extra */
            NULL};
        for (int i = 0; bad[i]; i++)
            errors += tp(bad[i]) != -EINVAL;
        errors += tp(NULL) != -EINVAL;
        char longv[100];
        memset(longv, 'v', sizeof longv - 1);
        longv[sizeof longv - 1] = '\0';
        errors += label_set("k", longv) != -EINVAL;
        errors += label_set("", "v") != -EINVAL;
        errors += label_set("k1", "a") != 0;
        errors += label_set("k2", "b") != 0;
        errors += label_set("k3", "c") != 0;
        errors += label_set("k4", "d") != 0;
        errors += label_set("k5", "e") != -ENOSPC;
        errors += label_set("k4", "d2") != 0; /* replacing a key is not a new one */
        errors += lclear("k5") != -ENOENT;
        errors += lclear("k1") != 0 || lclear("k2") != 0 || lclear("k3") != 0;
        errors += lclear("k4") != 0;
        errors += tp("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") != 0;
        errors += label_set("tenant", "acme") != 0;
        printf("api_errors=%d\n", errors);
        uint64_t end = cpu_ns() + (uint64_t)(secs * 1e9);
        while (cpu_ns() < end)
            span_a(300000);
    } else if (!strcmp(mode, "requests")) {
        if (requests_mode(atoi(argv[2])))
            return 9;
    } else if (!strcmp(mode, "quietspans")) {
        if (quietspans_mode(atoi(argv[2])))
            return 9;
    } else if (!strcmp(mode, "flush")) {
        void (*work_done)(uint64_t) =
            (void (*)(uint64_t))dlsym(RTLD_DEFAULT, "fleetprof_work_done");
        burn_for_cpu(0.3);
        for (int i = 0; work_done && i < 1000; i++)
            work_done(1);
        printf("flush=%d\n", flush ? flush() : -1000);
        if (work_done)
            work_done(234);
        burn_for_cpu(0.3);
    } else if (!strcmp(mode, "cpu4")) {
        pthread_t th[4];
        g_cpu_end = cpu_ns() + (uint64_t)(secs * 1e9);
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, cpu4_thread, (void *)(uintptr_t)(i + 1));
        while (cpu_ns() < g_cpu_end) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        atomic_store(&g_cpu4_stop, 1);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "statfd")) {
        statfd_mode();
    } else if (!strcmp(mode, "blockread")) {
        pthread_t th;
        if (pipe(g_pipe) != 0)
            return 7;
        pthread_create(&th, NULL, reader, NULL);
        pthread_setname_np(th, "reader");
        burn_for(secs);
        close(g_pipe[1]); /* read() returns 0 */
        pthread_join(th, NULL);
    } else if (!strcmp(mode, "churn") && argc > 3) {
        int n = atoi(argv[2]), wave = atoi(argv[3]), done = 0;
        pthread_t th[256];
        if (wave > 256)
            wave = 256;
        while (done < n) {
            int k = n - done < wave ? n - done : wave;
            for (int i = 0; i < k; i++)
                if (pthread_create(&th[i], NULL, churn_thread, NULL) != 0)
                    return 8;
            for (int i = 0; i < k; i++)
                pthread_join(th[i], NULL);
            done += k;
        }
        printf("threads=%d\n", done);
    } else if (!strcmp(mode, "sigprof")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = sigprof_handler;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGPROF, &sa, NULL) != 0)
            return 9;
        struct itimerval it = {{0, 10000}, {0, 10000}};
        if (setitimer(ITIMER_PROF, &it, NULL) != 0)
            return 9;
        burn_for_cpu(secs);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
        printf("sigprof=%d\n", (int)g_sigprof);
    } else if (!strcmp(mode, "step3") && argc > 3) {
        int n = atoi(argv[3]);
        run_threads(1, secs);
        printf("step1=%llu\n", (unsigned long long)real_ns());
        run_threads(n, secs);
        printf("step2=%llu\n", (unsigned long long)real_ns());
        run_threads(1, secs);
    } else if (!strcmp(mode, "idlecpu") && argc > 3) {
        sleep_here(secs);
        printf("load=%llu\n", (unsigned long long)real_ns());
        fflush(stdout);
        burn_for_cpu(atof(argv[3]));
    } else if (!strcmp(mode, "bursty")) {
        pthread_t th[2];
        g_cpu_end = cpu_ns() + (uint64_t)(secs * 1e9);
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, bursty_thread, (void *)(uintptr_t)(i + 1));
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "span2")) {
        pthread_t th[2];
        if (!span_set)
            return 3;
        g_span_set = span_set;
        g_cpu_end = cpu_ns() + (uint64_t)(secs * 1e9);
        for (int i = 0; i < 2; i++) {
            char name[16];
            snprintf(name, sizeof name, "span%d", i);
            pthread_create(&th[i], NULL, span2_thread, (void *)(uintptr_t)i);
            pthread_setname_np(th[i], name);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "status")) {
        usleep(300 * 1000); /* the agent's thread names itself once it runs */
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "SigCgt:", 7))
                printf("sigcgt=%s", line + 7 + strspn(line + 7, " \t"));
        if (f)
            fclose(f);
        printf("agent_threads=%d\n", agent_threads());
    } else {
        fprintf(stderr, "fp-work: bad arguments\n");
        return 2;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t ru_ns = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
                     ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
    printf("cpu_ns=%llu\nrusage_ns=%llu\nrss_kb=%ld\n", (unsigned long long)cpu_ns(),
           (unsigned long long)ru_ns, peak_rss_kb());
    return 0;
}
