/* Hostile case: 3,000 threads alive at once (more than the agent's 1,024 slots), each
 * allocating and waiting on a barrier, then all joined. Prints the thread count. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 3000
static pthread_barrier_t bar;
static volatile unsigned long sink;

static void *thr(void *arg) {
    for (int i = 0; i < 20; i++) {
        char *p = malloc(100 + (size_t)i * 50);
        p[0] = (char)i;
        sink += (unsigned long)p[0];
        free(p);
    }
    pthread_barrier_wait(&bar);
    return arg;
}

int main(void) {
    static pthread_t t[N];
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_barrier_init(&bar, NULL, N + 1);
    int made = 0;
    for (int i = 0; i < N; i++)
        made += pthread_create(&t[i], &a, thr, NULL) == 0;
    if (made != N) {
        printf("created %d of %d\n", made, N);
        return 1;
    }
    pthread_barrier_wait(&bar);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("threads=%d\n", made);
    return 0;
}
