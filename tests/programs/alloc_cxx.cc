// C++ allocation workload: new/delete (scalar, array, aligned, nothrow) from cxx_site and
// cxx_array_site; prints the bytes allocated at each site.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

struct alignas(64) Aligned {
    char b[256];
};

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

volatile unsigned long g_sink;

extern "C" __attribute__((noinline)) void cxx_site(unsigned long *bytes) {
    for (int i = 0; i < 100; i++) {
        char *p = new char[4000]; // operator new[]
        p[0] = 1;
        g_sink += (unsigned long)p;
        delete[] p;
        Aligned *a = new Aligned; // aligned operator new
        g_sink += (unsigned long)a;
        delete a;
        *bytes += 4000 + sizeof(Aligned);
    }
}

extern "C" __attribute__((noinline)) void cxx_nothrow_site(unsigned long *bytes) {
    for (int i = 0; i < 100; i++) {
        long *p = new (std::nothrow) long[500];
        g_sink += (unsigned long)p;
        delete[] p;
        *bytes += 500 * sizeof(long);
    }
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    unsigned long a = 0, b = 0;
    double end = now_s() + secs;
    while (now_s() < end) {
        cxx_site(&a);
        cxx_nothrow_site(&b);
    }
    printf("cxx_bytes=%lu nothrow_bytes=%lu\n", a, b);
    return 0;
}
