# cfi-vs-perf workload (issue 14): CPU-bound pure Python on Debian's python3 (no frame pointers).
# Usage: python3 work.py SECONDS
import json, re, sys, time

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def encode(rounds):
    doc = {"k%d" % i: [i, str(i) * 3, {"x": i / 7.0}] for i in range(200)}
    n = 0
    for _ in range(rounds):
        n += len(json.dumps(doc, sort_keys=True))
    return n

WORDS = re.compile(r"[a-z]+[0-9]*")
def scan(rounds):
    text = " ".join("word%d other%d" % (i, i * 7) for i in range(500))
    n = 0
    for _ in range(rounds):
        n += len(WORDS.findall(text))
    return n

end = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 5)
total = 0
while time.monotonic() < end:
    total += fib(18) + encode(5) + scan(5)
print(total)
