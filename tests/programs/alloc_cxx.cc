// C++ allocation workload: every form of operator new/delete from cxx_site (scalar, array,
// aligned scalar and array, with sized deletes) and cxx_nothrow_site (nothrow array and
// nothrow aligned); everything is deleted before exit. Runs for SECONDS and until each site
// allocated 24 GiB (at most 4 x SECONDS). Prints the bytes allocated at each site.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

struct alignas(64) Aligned {
    char b[256];
};

struct Small {
    char b[48];
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
        Aligned *a = new Aligned; // aligned operator new, sized aligned delete
        g_sink += (unsigned long)a;
        delete a;
        Small *s = new Small; // operator new, sized delete
        g_sink += (unsigned long)s;
        delete s;
        Aligned *aa = new Aligned[4]; // aligned operator new[]
        g_sink += (unsigned long)aa;
        delete[] aa;
        *bytes += 4000 + sizeof(Aligned) + sizeof(Small) + 4 * sizeof(Aligned);
    }
}

extern "C" __attribute__((noinline)) void cxx_nothrow_site(unsigned long *bytes) {
    for (int i = 0; i < 100; i++) {
        long *p = new (std::nothrow) long[500];
        g_sink += (unsigned long)p;
        delete[] p;
        Aligned *a = new (std::nothrow) Aligned; // aligned nothrow
        g_sink += (unsigned long)a;
        delete a;
        *bytes += 500 * sizeof(long) + sizeof(Aligned);
    }
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    unsigned long a = 0, b = 0;
    double start = now_s();
    // SECONDS, and longer (up to 4x) until each site allocated 24 GiB
    while (now_s() < start + secs || (b < (24ul << 30) && now_s() < start + 4 * secs)) {
        cxx_site(&a);
        cxx_nothrow_site(&b);
    }
    printf("cxx_bytes=%lu nothrow_bytes=%lu\n", a, b);
    return 0;
}
