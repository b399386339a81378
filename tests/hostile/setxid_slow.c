/* Hostile case (review of issue 27, findings 2 and 4): the agent's thread answers no
 * credential request (FLEETPROF_TEST_CFI_DELAY_MS: a start-up step that serves none, as a
 * long table build on a huge binary could), and
 *   1. main's setgid(0) (a no-op as root, still a broadcast) is left by a siglongjmp from a
 *      SIGALRM handler 200 ms in, while the agent's interposer waits for our thread holding
 *      its lock (without the agent the jump leaves the sleep after it);
 *   2. a new thread then drops the process to nobody with setresgid/setresuid: the lock's
 *      holder is gone by a jump, not by returning, so that call must not wait for it forever
 *      (it did: a spin without deadline), nor let the broadcast meet our thread with
 *      credentials it could not take (glibc's setxid_error abort): profiling stops, our
 *      thread exits, the calls go ahead.
 * Prints the results, whether both steps together took under 6 s (the agent's bounds: 3 s for
 * the lock, 1 s for the exit; it was unbounded) and how many "fleetprof" threads are left (0:
 * gone before the broadcast, as it must be; the plain run has none). Not root: the calls fail
 * in both runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf g_jmp;
static volatile int stop;

static void on_alarm(int sig) {
    (void)sig;
    siglongjmp(g_jmp, 1);
}

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop)
        x++;
    return NULL;
}

static void *dropper(void *arg) {
    int *rc = arg;
    rc[0] = setresgid(65534, 65534, 65534) == 0 ? 0 : errno;
    rc[1] = setresuid(65534, 65534, 65534) == 0 ? 0 : errno;
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int agent_threads(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    char path[300], name[64];
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(name, sizeof name, f) && !strncmp(name, "fleetprof", 9))
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

int main(void) {
    int root = geteuid() == 0;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, spin, NULL);
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    double t0 = now_s();
    int jumped = 0, g = -1;
    if (sigsetjmp(g_jmp, 1) == 0) {
        struct itimerval it = {{0, 0}, {0, 200000}};
        setitimer(ITIMER_REAL, &it, NULL);
        g = setgid(0) == 0 ? 0 : errno;
        double t1 = now_s();
        fprintf(stderr, "setgid returned after %.3f s\n", t1 - t0);
        for (;;)
            pause();
    }
    jumped = 1;
    fprintf(stderr, "jumped out after %.3f s (setgid %s)\n", now_s() - t0,
            g < 0 ? "interrupted: the interposer held its lock" : "had returned");
    int rc[2] = {-1, -1};
    pthread_t d;
    pthread_create(&d, NULL, dropper, rc);
    pthread_join(d, NULL);
    double took = now_s() - t0;
    fprintf(stderr, "both steps took %.3f s\n", took);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    printf("root=%d jumped=%d setresgid=%s setresuid=%s uids=%u,%u,%u under_6s=%d "
           "agent_threads=%d\n",
           root, jumped, rc[0] ? strerrorname_np(rc[0]) : "0", rc[1] ? strerrorname_np(rc[1]) : "0",
           r, e, s, took < 6.0, agent_threads());
    return 0;
}
