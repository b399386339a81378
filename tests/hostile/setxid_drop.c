/* Hostile case: a multi-threaded root program drops to nobody (setgroups, setresgid,
 * setresuid): glibc broadcasts each call to every thread (SIGSETXID), the agent's included,
 * and every thread must follow. Not root: the calls fail with EPERM in both runs. (After the
 * drop the agent can no longer write into the runner's root-owned output directory: the
 * chunks it wrote before remain.) */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "first_chunk.h"

static volatile int stop;

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop)
        x++;
    return NULL;
}

int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, spin, NULL);
    first_chunk_wait(0.3, 10); /* a chunk first: the output directory is root's */
    struct timespec ts = {0, 300000000};
    int root = geteuid() == 0;
    gid_t nog = 65534;
    int g = setgroups(1, &nog) == 0 ? 0 : errno;
    int rg = setresgid(65534, 65534, 65534) == 0 ? 0 : errno;
    int ru = setresuid(65534, 65534, 65534) == 0 ? 0 : errno;
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    nanosleep(&ts, NULL);
    stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("root=%d setgroups=%d setresgid=%d setresuid=%d uid_now_nobody=%d\n", root, g, rg, ru,
           r == 65534 && e == 65534 && s == 65534);
    return 0;
}
