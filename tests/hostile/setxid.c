/* Hostile case: privilege changes in a multi-threaded program. glibc broadcasts every set*id
 * call to all threads (SIGSETXID), the agent's included, and aborts (setxid_error) when the
 * call succeeds on one thread and fails on another. Capabilities are per thread: here every
 * application thread drops CAP_SETUID/CAP_SETGID from its own sets first (as a sandboxing
 * thread pool does), so setgroups/setresgid/setresuid fail with EPERM on every application
 * thread, consistently: glibc returns the error. The agent's thread, which kept its
 * capabilities, must fail the same way rather than succeed. Prints the results. Not root: the
 * same calls fail with EPERM in both runs. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
static pthread_barrier_t bar;

static int drop_setid_caps(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    unsigned mask = ~((1u << CAP_SETUID) | (1u << CAP_SETGID));
    d[0].effective &= mask;
    d[0].permitted &= mask;
    d[0].inheritable &= mask;
    return (int)syscall(SYS_capset, &h, d);
}

static void *spin(void *arg) {
    (void)arg;
    drop_setid_caps(); /* this thread only */
    pthread_barrier_wait(&bar);
    volatile unsigned long x = 0;
    while (!stop)
        x++;
    return NULL;
}

int main(void) {
    pthread_t t[3];
    pthread_barrier_init(&bar, NULL, 4);
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, spin, NULL);
    int dropped = drop_setid_caps();
    pthread_barrier_wait(&bar);
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    int root = geteuid() == 0;
    gid_t nog = 65534;
    int g = setgroups(1, &nog) == 0 ? 0 : errno;
    int rg = setresgid(65534, 65534, 65534) == 0 ? 0 : errno;
    int ru = setresuid(65534, 65534, 65534) == 0 ? 0 : errno;
    nanosleep(&ts, NULL);
    stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("root=%d caps_dropped=%d setgroups=%s setresgid=%s setresuid=%s\n", root, dropped == 0,
           strerrorname_np(g) ? strerrorname_np(g) : "0", strerrorname_np(rg) ? strerrorname_np(rg) : "0",
           strerrorname_np(ru) ? strerrorname_np(ru) : "0");
    return 0;
}
