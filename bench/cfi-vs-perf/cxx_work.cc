// cfi-vs-perf workload (issue 14): C++ with templates and std::thread, built with plain -O2
// (no frame pointers). Usage: cxx_work SECONDS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

template <typename T> struct Acc {
    T sum{};
    template <typename It> __attribute__((noinline)) void add_all(It b, It e) {
        for (; b != e; ++b)
            sum += static_cast<T>(*b) / (static_cast<T>(*b % 13) + 1);
    }
};

template <typename K, typename V> __attribute__((noinline)) size_t build_map(int n, int seed) {
    std::map<K, V> m;
    for (int i = 0; i < n; i++)
        m[static_cast<K>((i * 2654435761u + seed) % 100000)] += static_cast<V>(i);
    return m.size();
}

__attribute__((noinline)) size_t strings(int n, int seed) {
    std::unordered_map<std::string, int> h;
    for (int i = 0; i < n; i++)
        h[std::to_string((i * 7919 + seed) % 5000)]++;
    return h.size();
}

template <typename T> __attribute__((noinline)) T sorter(int n, int seed) {
    std::vector<T> v(n);
    for (int i = 0; i < n; i++)
        v[i] = static_cast<T>((i * 48271u + seed) % 1000003);
    std::sort(v.begin(), v.end());
    Acc<double> a;
    a.add_all(v.begin(), v.end());
    return static_cast<T>(a.sum);
}

static void worker(int id, double secs, double *out) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    double s = 0;
    while (std::chrono::steady_clock::now() < end) {
        s += build_map<int, long>(20000, id);
        s += strings(20000, id);
        s += sorter<long>(50000, id);
        s += sorter<unsigned>(50000, id + 1);
    }
    *out = s;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5;
    double r[4];
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; i++)
        ts.emplace_back(worker, i, secs, &r[i]);
    for (auto &t : ts)
        t.join();
    printf("%g\n", r[0] + r[1] + r[2] + r[3]);
}
