"""Known Python stacks for test-agent-python (issue 34): the main thread spins in
outer -> middle -> inner_loop (pure Python), a second thread in spinner, a third sleeps in
sleeper (time.sleep: it never holds the GIL while sampled). argv[1]: seconds."""
import sys
import threading
import time


def inner_loop(end):
    n = 0
    while time.time() < end:
        n += 1  # LINE_INNER
    return n


def middle(end):
    return inner_loop(end)


def outer(end):
    return middle(end)


def spinner(end):
    x = 0
    while time.time() < end:
        x = (x * 31 + 7) % 1000003  # LINE_SPIN
    return x


def sleeper(end):
    while time.time() < end:
        time.sleep(0.05)  # LINE_SLEEP


if __name__ == "__main__":
    end = time.time() + float(sys.argv[1])
    ts = [threading.Thread(target=spinner, args=(end,), name="spinner"),
          threading.Thread(target=sleeper, args=(end,), name="sleeper")]
    for t in ts:
        t.start()
    outer(end)
    for t in ts:
        t.join()
    print("done")
