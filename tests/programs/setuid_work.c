/* setuid_work SECS_BEFORE SECS_AFTER: burns SECS_BEFORE of wall time as the starting user,
 * then drops to nobody (setgroups, setgid, setuid: what nginx's workers do) and burns
 * SECS_AFTER more. For tests/test-fleet-uid.c: an agent whose FLEETPROF_OUTPUT becomes
 * unwritable after the switch. Prints uid=<uid after the switch>. */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile unsigned long sink;

static void __attribute__((noinline)) burn_until(double end) {
    while (now() < end)
        for (int i = 0; i < 100000; i++)
            sink += (unsigned long)i * 2654435761u;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: setuid_work SECS_BEFORE SECS_AFTER\n");
        return 2;
    }
    burn_until(now() + atof(argv[1]));
    if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
        perror("setuid_work: dropping to nobody");
        return 1;
    }
    burn_until(now() + atof(argv[2]));
    printf("uid=%d\n", (int)getuid());
    return 0;
}
