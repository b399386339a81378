// Robustness workload for the agent's Java mode: many threads, each catching
// NullPointerExceptions (implicit null checks: the JVM's SIGSEGV handler turns them into
// exceptions), throwing and catching its own exceptions through recursion, allocating enough
// to keep the GC busy, and meeting the others at a lock. Deterministic: prints the same
// "checksum <n>" on every correct run (args: threads, rounds).
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class Stress {
    static final Object lock = new Object();
    static long shared;

    static final class Oops extends Exception {
        final int depth;
        Oops(int depth) {
            super("depth " + depth);
            this.depth = depth;
        }
    }

    static final class Node {
        Node next;
        int value;
    }

    static int deref(Node n) {
        return n.next.value; // n.next null half of the time: an implicit null check
    }

    static int recurse(int depth, int limit) throws Oops {
        if (depth == limit)
            throw new Oops(depth);
        return recurse(depth + 1, limit) + 1;
    }

    static long work(int id, int rounds) {
        long sum = 0;
        Node a = new Node(), b = new Node();
        a.next = b;
        b.value = id;
        for (int r = 0; r < rounds; r++) {
            try {
                sum += deref((r & 1) == 0 ? a : b);
            } catch (NullPointerException e) {
                sum += 3;
            }
            try {
                sum += recurse(0, 5 + r % 20);
            } catch (Oops e) {
                sum += e.depth;
            }
            List<int[]> garbage = new ArrayList<>();
            for (int i = 0; i < 20; i++)
                garbage.add(new int[256 + (r + i) % 512]);
            sum += garbage.size();
            Map<String, Integer> m = new HashMap<>();
            for (int i = 0; i < 8; i++)
                m.put("k" + (i * r % 13), i);
            sum += m.size();
            try {
                Object o = m;
                sum += ((String) o).length(); // ClassCastException
            } catch (ClassCastException e) {
                sum += 1;
            }
            if (r % 64 == 0) {
                synchronized (lock) {
                    shared += id;
                }
            }
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 32;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 20000;
        long[] results = new long[threads];
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            ts[t] = new Thread(() -> results[id] = work(id, rounds), "stress-" + t);
            ts[t].start();
        }
        for (Thread t : ts)
            t.join();
        System.gc();
        long total = shared;
        for (long r : results)
            total = total * 31 + r;
        System.out.println("checksum " + total);
    }
}
