// Test program: CPU in a C++ function whose demangled name is longer than 1,000 bytes (nested
// standard-library templates), for tests/test-symbols.c. Usage: symwork_cxx SECONDS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

template <int N, typename T> struct Deep {
    typedef std::pair<typename Deep<N - 1, T>::type, std::map<std::string, T>> type;
};
template <typename T> struct Deep<0, T> { typedef T type; };

static volatile double sink;

template <typename T> __attribute__((noinline)) double long_named_burn(T *, int n) {
    double x = 0;
    for (int i = 1; i < n; i++)
        x += (double)(i % 7) / (double)i;
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? std::atof(argv[1]) : 1;
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < secs)
        sink += long_named_burn<Deep<5, int>::type>(nullptr, 400000);
    std::printf("%f\n", (double)sink);
    return 0;
}
