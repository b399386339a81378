/* Hostile case (issue 27): a libcap program drops root the way container entrypoints do, with
 * 4 busy threads: PR_SET_KEEPCAPS (before the threads start: they inherit it; ours, started
 * earlier, does not), setresuid (glibc broadcasts it to every thread: ours lost every
 * capability, no KEEPCAPS), cap_set_proc raising CAP_SETGID again (per thread: each thread of
 * the program raises its own), then setgroups and setresgid (broadcast: they succeed on the
 * program's threads, and must on ours too or glibc aborts), then every capability dropped.
 * Prints each result, the ids and the capabilities it ends with, and how many of the process's
 * threads (ours included) hold other ids or capabilities than main. Not root: the calls fail
 * with EPERM in both runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "first_chunk.h"

enum { N = 4 };
static volatile int stop;
static pthread_barrier_t raised, dropped;
static int raise_rc[N], drop_rc[N];

static int set_caps(const char *text) {
    cap_t c = cap_from_text(text);
    int rc = c && cap_set_proc(c) == 0 ? 0 : errno;
    cap_free(c);
    return rc;
}

static void *worker(void *arg) {
    int i = (int)(long)arg;
    volatile unsigned long x = 0;
    for (int k = 0; k < 2; k++) {
        pthread_barrier_wait(&raised); /* main: setresuid done; then: ready to drop */
        if (k == 0)
            raise_rc[i] = set_caps("cap_setuid,cap_setgid=ep");
        else
            drop_rc[i] = set_caps("=");
        pthread_barrier_wait(&dropped);
        for (int j = 0; j < 20000000 && !stop; j++)
            x++;
    }
    while (!stop)
        x++;
    return NULL;
}

/* The Uid, Gid, Groups and Cap* lines of a thread's status, concatenated. */
static void creds_of(const char *tid, char *out, size_t size) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
    FILE *f = fopen(path, "r");
    size_t n = 0;
    out[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4) ||
            !strncmp(line, "Groups:", 7) || !strncmp(line, "Cap", 3))
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s", line);
    if (f)
        fclose(f);
}

static int threads_unlike_main(void) {
    char mine[1024], other[1024], self[32];
    snprintf(self, sizeof self, "%d", gettid());
    creds_of(self, mine, sizeof mine);
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int unlike = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            creds_of(e->d_name, other, sizeof other);
            unlike += strcmp(mine, other) != 0;
        }
    if (d)
        closedir(d);
    return mine[0] ? unlike : -1;
}

static const char *name(int e) { return e ? strerrorname_np(e) : "0"; }

int main(void) {
    int root = geteuid() == 0;
    int kc = prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0 ? 0 : errno;
    pthread_barrier_init(&raised, NULL, N + 1);
    pthread_barrier_init(&dropped, NULL, N + 1);
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        pthread_create(&t[i], NULL, worker, (void *)(long)i);
    first_chunk_wait(0.4, 10); /* a chunk first: the output directory is root's */
    int ru = setresuid(65534, 65534, 65534) == 0 ? 0 : errno;
    pthread_barrier_wait(&raised);
    int raised_main = set_caps("cap_setuid,cap_setgid=ep");
    pthread_barrier_wait(&dropped);
    gid_t nog = 65534;
    int g = setgroups(1, &nog) == 0 ? 0 : errno;
    int rg = setresgid(65534, 65534, 65534) == 0 ? 0 : errno;
    pthread_barrier_wait(&raised);
    int drop_main = set_caps("=");
    pthread_barrier_wait(&dropped);
    /* our thread has the last credentials: it follows before returning */
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    int unlike = threads_unlike_main();
    stop = 1;
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("root=%d keepcaps=%s setresuid=%s cap_set_proc=%s", root, name(kc), name(ru),
           name(raised_main));
    for (int i = 0; i < N; i++)
        printf(",%s", name(raise_rc[i]));
    printf(" setgroups=%s setresgid=%s drop=%s", name(g), name(rg), name(drop_main));
    for (int i = 0; i < N; i++)
        printf(",%s", name(drop_rc[i]));
    uid_t r, e, s;
    gid_t rgid, egid, sgid;
    getresuid(&r, &e, &s);
    getresgid(&rgid, &egid, &sgid);
    cap_t now = cap_get_proc();
    char *text = cap_to_text(now, NULL);
    printf("\nuids=%u,%u,%u gids=%u,%u,%u groups=%d caps=\"%s\" threads_unlike_main=%d\n", r, e,
           s, rgid, egid, sgid, getgroups(0, NULL), text, unlike);
    cap_free(text);
    cap_free(now);
    return 0;
}
