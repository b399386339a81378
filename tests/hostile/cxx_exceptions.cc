// Hostile case: 4 threads throw and catch C++ exceptions as fast as they can for a second
// (the unwinder takes the loader's lock; samples land in the middle of it). Prints the
// exceptions each thread caught, bounded: every thread caught enough and counted right.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static __attribute__((noinline)) void thrower(int depth, long i) {
    if (depth == 0)
        throw std::runtime_error("e" + std::to_string(i));
    thrower(depth - 1, i);
}

int main() {
    std::atomic<int> ok{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&ok] {
            auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
            long caught = 0, right = 0;
            for (long i = 0; std::chrono::steady_clock::now() < end; i++) {
                try {
                    thrower((int)(i % 8), i);
                } catch (const std::runtime_error &e) {
                    caught++;
                    right += e.what() == "e" + std::to_string(i);
                }
            }
            if (caught > 1000 && right == caught)
                ok++;
        });
    for (auto &t : ts)
        t.join();
    std::printf("threads_ok=%d\n", ok.load());
    return 0;
}
