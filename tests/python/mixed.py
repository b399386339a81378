"""Mixed CPU workload for the Python frame test (issue 34): pure-Python loops (collatz,
pure_loop), json, re, hashlib, on the main thread and argv[2] worker threads (default 1) spinning in fib. Runs for
argv[1] seconds (default 5)."""
import hashlib
import json
import re
import sys
import threading
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def collatz(limit):
    steps = 0
    for n in range(1, limit):
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            steps += 1
    return steps


def pure_loop():
    total = 0
    for i in range(20000):
        total += i * i % 7
    return total


class Doc:
    def encode(self, rows):
        return json.dumps(rows)

    def decode(self, text):
        return json.loads(text)


WORDS = re.compile(r"(\w+)@(\w+)\.com")


def regex_scan(text):
    return len(WORDS.findall(text))


def digest(data):
    h = hashlib.sha256()
    for _ in range(20):
        h.update(data)
    return h.hexdigest()


def main_work(deadline):
    doc = Doc()
    rows = [{"id": i, "name": "n%d" % i, "tags": ["a", "b", i]} for i in range(200)]
    text = " ".join("user%d@host%d.com filler words here" % (i, i) for i in range(300))
    data = b"x" * 65536
    while time.time() < deadline:
        collatz(300)
        pure_loop()
        doc.decode(doc.encode(rows))
        regex_scan(text)
        digest(data)


def worker(deadline):
    while time.time() < deadline:
        fib(20)


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    end = time.time() + secs
    workers = [threading.Thread(target=worker, args=(end,))
               for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1)]
    for t in workers:
        t.start()
    main_work(end)
    for t in workers:
        t.join()
