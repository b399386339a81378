/* Hostile case (issue 27): a thread drops CAP_SETUID from its own sets and exits; then main,
 * still privileged, drops to nobody with setresuid (glibc broadcasts it: only main is left).
 * Our thread followed the dropping thread (it never holds more than the last thread that
 * changed its credentials) and cannot take main's back: the agent must stop profiling in this
 * process before the call (one warning, DROP_HOST_UNSAFE) rather than fail it on its thread,
 * which would make glibc abort (the agent before issue 27 kept CAP_SETUID: it never followed
 * a raw capset). Prints the results. Not root: the calls fail in both runs. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *dropper(void *arg) {
    int *rc = arg;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    *rc = -1;
    if (syscall(SYS_capget, &h, d) == 0) {
        unsigned mask = ~((1u << CAP_SETUID) | (1u << CAP_SETGID));
        d[0].effective &= mask;
        d[0].permitted &= mask;
        d[0].inheritable &= mask;
        *rc = syscall(SYS_capset, &h, d) == 0 ? 0 : errno;
    }
    return NULL;
}

int main(void) {
    int root = geteuid() == 0;
    struct timespec ts = {0, 300000000}; /* a chunk first: the output directory is root's */
    nanosleep(&ts, NULL);
    int dropped;
    pthread_t t;
    pthread_create(&t, NULL, dropper, &dropped);
    pthread_join(t, NULL);
    int ru = setresuid(65534, 65534, 65534) == 0 ? 0 : errno;
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    printf("root=%d thread_dropped=%d setresuid=%s uids=%u,%u,%u\n", root, dropped == 0, ru ? strerrorname_np(ru) : "0", r, e, s);
    return 0;
}
