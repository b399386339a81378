// CPU workload for the Java frames tests and benchmark: main runs four kinds of work in turn,
// each in its own method so that profilers' self shares can be compared (a hash loop, a sieve,
// a string builder + hash, a sort; fib, a deep recursion of tiny calls, only with "fib" as
// args[2]: JFR's sampler under-counts it, bench/RESULTS.md), for args[0]: seconds (default 10), "5c" (until the
// thread used 5 s of CPU, whatever the machine's load) or "40i" (40 rounds: fixed work).
// A second thread ("spinner") runs spin() throughout unless args[1] is 0 (or rounds are
// counted). Prints "done true".
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;

public class Work {
    static volatile long sink;

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static long mix(long x, int n) {
        for (int i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    static int sieve(int n) {
        boolean[] composite = new boolean[n + 1];
        int count = 0;
        for (int i = 2; i <= n; i++) {
            if (composite[i])
                continue;
            count++;
            for (long j = (long) i * i; j <= n; j += i)
                composite[(int) j] = true;
        }
        return count;
    }

    static int strings(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++)
            sb.append(i % 7).append(',');
        return sb.toString().hashCode();
    }

    static long sortArr(int n, long seed) {
        long[] a = new long[n];
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005L + 1442695040888963407L;
            a[i] = seed >>> 11;
        }
        Arrays.sort(a);
        return a[n / 2];
    }

    static long spin(long x) {
        for (int i = 0; i < 1000000; i++)
            x = x * 31 + (x >>> 7) + i;
        return x;
    }

    static ThreadMXBean threads;
    static boolean cpu, withFib;
    static long end, rounds = -1;

    /* Not done yet: the wall-clock end not reached, or the calling thread's CPU time short of it. */
    static boolean more() {
        if (rounds >= 0)
            return rounds-- > 0;
        return (cpu ? threads.getCurrentThreadCpuTime() : System.nanoTime()) < end;
    }

    public static void main(String[] args) throws Exception {
        String arg = args.length > 0 ? args[0] : "10";
        cpu = arg.endsWith("c");
        threads = ManagementFactory.getThreadMXBean();
        if (arg.endsWith("i"))
            rounds = Long.parseLong(arg.substring(0, arg.length() - 1));
        double secs = rounds >= 0 ? 0 : Double.parseDouble(cpu ? arg.substring(0, arg.length() - 1) : arg);
        end = (cpu ? 0 : System.nanoTime()) + (long) (secs * 1e9);
        Thread spinner = new Thread(() -> {
            long x = 1;
            while (more())
                x = spin(x);
            sink += x;
        }, "spinner");
        withFib = args.length > 2 && args[2].equals("fib");
        boolean spin = rounds < 0 && (args.length < 2 || !args[1].equals("0"));
        if (spin)
            spinner.start();
        long sum = 0;
        while (more()) {
            sum += withFib ? fib(32) : mix(sum, 5_000_000);
            sum += sieve(2_800_000);
            sum += strings(300_000);
            sum += sortArr(100_000, sum);
        }
        if (spin)
            spinner.join();
        System.out.println("done " + (sum != 0));
    }
}
