/* Hostile case: RLIMIT_NOFILE=16 (issue 13). The program re-executes itself under the limit
 * (so that the agent starts under it too), runs 4 threads that are on CPU about half of the
 * time for 0.6 s (the wall sampler reads their /proc state and used to keep those descriptors
 * open), then opens /dev/null until EMFILE while they still run. A transient descriptor of the
 * agent (a /proc read, a chunk file being written) can take the last number for a few
 * microseconds: after EMFILE the program retries 3 times 2 ms apart, so that what is counted
 * is what the agent keeps. Prints how many files it could open: 13 without the agent (16 minus
 * stdin, stdout, stderr), and the same with it (no collector: the agent keeps no descriptor;
 * a connected collector socket would be one). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_stop;

static void *half_busy(void *arg) {
    (void)arg;
    while (!atomic_load(&g_stop)) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        volatile unsigned long x = 0;
        (void)x; /* read once: clang warns of a variable only ever written */
        do {
            for (int i = 0; i < 1000; i++)
                x += (unsigned long)i;
            clock_gettime(CLOCK_MONOTONIC, &b);
        } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 8000000L);
        struct timespec ts = {0, 8000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "limited") != 0) {
        struct rlimit rl = {16, 16};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            perror("setrlimit");
            return 2;
        }
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "limited", (char *)NULL);
        perror("exec");
        return 2;
    }
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, half_busy, NULL);
    struct timespec ts = {0, 600000000L};
    nanosleep(&ts, NULL);
    int n = 0, retries = 0;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            n++;
            continue;
        }
        if (errno != EMFILE || ++retries > 3)
            break;
        struct timespec r = {0, 2000000L};
        nanosleep(&r, NULL);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    printf("files opened under RLIMIT_NOFILE=16: %d\n", n);
    return 0;
}
