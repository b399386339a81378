#!/usr/bin/env python3
"""Compares the agent's CPU stacks with perf --call-graph dwarf on the same workload (issue 14).

Both sides' frames are resolved to (object, function) the same way: nm of the file (its
.symtab, else .dynsym, preferring a /usr/lib/debug/.build-id debug file), perf's file offsets
turned into virtual addresses. Prints the share of weight on complete stacks (root in _start,
__libc_start_*, start_thread or clone3, and not flagged truncated), perf's top 20 functions by
inclusive share beside ours, and the heaviest incomplete stacks.

  perf record -F 499 -g --call-graph dwarf,32768 -o perf.data PROGRAM
  FLEETPROF_OUTPUT=out LD_PRELOAD=.../libfleetprof.so PROGRAM
  dump-stacks out/*.fpc > ours.txt
  cfi-vs-perf.py [--drop-switch] [--drop-agent] [--pid=PID] perf.data ours.txt LABEL

--pid=PID: keep only process PID's samples (all its threads): perf recorded every task of the
machine (cfi-vs-perf.sh PERF_SYSTEM=1: `perf record -a -C CPU`, per-CPU cpu-clock timers that
fire at fixed intervals whatever runs). A sample is then late only by an interrupts-off window:
~4% of redis-server's land at finish_task_switch (switch-in from epoll_wait), against ~42% with
per-task recording (`-p PID`, whose timer stops and restarts around each context switch).

--drop-agent: perf recorded the same run as the agent (cfi-vs-perf.sh SIMUL=1); perf's samples of
the agent's thread and handler are left out.
"""
import bisect, collections, os, subprocess, sys

ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "clone3", "clone", "start_thread", "__clone3", "__clone"}
_syms = {}
def debug_file(path):
    try:
        out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    except Exception:
        return None
    for line in out.splitlines():
        if "Build ID:" in line:
            b = line.split("Build ID:")[1].strip()
            f = f"/usr/lib/debug/.build-id/{b[:2]}/{b[2:]}.debug"
            return f if os.path.exists(f) else None
    return None

def syms(path):
    if path in _syms: return _syms[path]
    tab = {}
    files = [path]
    dbg = debug_file(path)
    if dbg: files.insert(0, dbg)
    for flag, f in [([], x) for x in files] + [(["-D"], path)]:
        try:
            out = subprocess.run(["nm", "-S", "--defined-only"] + flag + [f], capture_output=True, text=True).stdout
        except Exception:
            out = ""
        for line in out.splitlines():
            p = line.split()
            if len(p) >= 3: p[-1] = p[-1].split("@")[0]
            if len(p) == 4 and p[2] in "TtWwi":
                a, s = int(p[0], 16), int(p[1], 16)
                if a not in tab or tab[a][1].startswith("_") and not p[3].startswith("_"):
                    tab[a] = (s, p[3])
            elif len(p) == 3 and p[1] in "TtWwi":
                a = int(p[0], 16)
                tab.setdefault(a, (0, p[2]))
    keys = sorted(tab)
    _syms[path] = (keys, tab)
    return _syms[path]

def name(path, addr):
    keys, tab = syms(path)
    i = bisect.bisect_right(keys, addr) - 1
    base = os.path.basename(os.path.realpath(path))
    if i >= 0:
        s, n = tab[keys[i]]
        if s == 0 or addr < keys[i] + s:
            return base + ":" + n
    return base + ":?"

_loads = {}
def off2va(path, off):
    if path not in _loads:
        segs = []
        try:
            out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
            for line in out.splitlines():
                p = line.split()
                if p and p[0] == "LOAD":
                    segs.append((int(p[1], 16), int(p[2], 16), int(p[4], 16)))
        except Exception:
            pass
        _loads[path] = segs
    for o, v, fs in _loads[path]:
        if o <= off < o + fs:
            return off - o + v
    return off

# perf samples whose kernel leaf is one of these are left out (--drop-switch): a cpu-clock
# sample whose hrtimer expired while interrupts were off in a context switch fires when
# finish_task_switch re-enables them, after the task was switched back in; its period is CPU
# spent before the task blocked, but it lands under the blocking call (epoll_wait).
SWITCH = {"finish_task_switch.isra.0", "finish_task_switch"}

_exports = {}
def exports(path):
    """Names path exports (nm -D), read once per file."""
    if path not in _exports:
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
        _exports[path] = {l.split()[-1].split("@")[0] for l in out.splitlines() if len(l.split()) >= 3}
    return _exports[path]

def perf_stacks(data, drop_switch=False, drop_agent=False, pid=None):
    """perf's samples as (period, user frames leaf first). drop_agent (perf and the agent on the
    same run): leaves out the agent's background thread and every sample taken inside the
    agent's own code (its signal handler; not its interposers, which are the application's
    calls), whose CPU the agent's samples spread over the next sample's stack."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,period,ip,sym,dso", "--no-inline"] +
                         ([f"--pid={pid}"] if pid else []), capture_output=True, text=True).stdout
    stacks, cur, w, kleaf, dropped, comm, agent_dropped = [], [], 0, None, 0, "", 0
    switch = 0
    for line in out.splitlines() + [""]:
        if not line.strip():
            if cur or comm == "fleetprof":
                internal = drop_agent and (comm == "fleetprof" or any(
                    "libfleetprof" in d and name(d, a).split(":", 1)[1] not in exports(d)
                    for d, a in cur))
                if internal: agent_dropped += 1
                elif drop_switch and kleaf in SWITCH: dropped += 1
                elif cur:
                    stacks.append((w, cur))
                    switch += kleaf in SWITCH
            cur, kleaf, comm = [], None, ""
            continue
        if not line.startswith("\t") and not line.startswith(" " * 8) or line.strip().isdigit():
            p = line.split()
            if p and p[-1].isdigit():
                w = int(p[-1]); comm = " ".join(p[:-1]); continue
        p = line.strip().split(None, 1)
        if len(p) < 2: continue
        addr = int(p[0], 16); rest = p[1]
        dso = rest[rest.rfind("(") + 1:].rstrip(")") if "(" in rest else rest
        if "kernel" in dso or dso.startswith("["):
            if kleaf is None: kleaf = rest.split(None, 1)[0].split("+")[0]
            continue
        cur.append((dso, off2va(dso, addr)))
    if drop_switch: print(f"perf: {dropped} samples left out (kernel leaf finish_task_switch)")
    else: print(f"perf: {switch} of {len(stacks)} samples with kernel leaf finish_task_switch (kept)")
    if drop_agent: print(f"perf: {agent_dropped} samples left out (the agent's thread or handler)")
    return stacks

def our_stacks(path):
    stacks = []
    for line in open(path):
        w, fl, fr = line.rstrip("\n").split(" ", 2)
        frames = []
        for f in fr.split(";"):
            dso, a = f.rsplit(":", 1)
            frames.append((dso, int(a, 16)))
        stacks.append((int(w), frames, int(fl) & 3))  # truncated or incomplete
    return stacks

_dsos, _real = set(), {}
def real_name(n):
    """An agent interposer frame in perf's stacks (perf's run with the agent preloaded,
    PERF_PRELOAD=1) named as the agent names its hook frames: the real function's object and
    name (e.g. libfleetprof.so:_Znwm -> libstdc++.so.6.0.30:_Znwm)."""
    base, fn = n.split(":", 1)
    if "libfleetprof" not in base: return n
    lib = next((d for d in _dsos if "libfleetprof" in d), None)
    if lib is None or fn not in exports(lib): return n
    if fn not in _real:
        _real[fn] = n
        for d in sorted(_dsos):
            if "libfleetprof" not in d and fn in exports(d):
                _real[fn] = os.path.basename(os.path.realpath(d)) + ":" + fn
                break
    return _real[fn]

def resolve(frames, ours=False):
    # perf prints callers' return addresses: name the call (ra - 1). The agent's locations are
    # already the call's address (builder.c: pc - 1), and an interposer frame is located at
    # the real function's entry, which ra - 1 would put in the function before it.
    if ours: return [name(d, a) for d, a in frames]
    _dsos.update(d for d, _ in frames)
    return [real_name(name(d, a if i == 0 else a - 1)) for i, (d, a) in enumerate(frames)]

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    perf_data, ours_file, label = args[0], args[1], args[2]
    pid = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--pid=")), None)
    ps = perf_stacks(perf_data, "--drop-switch" in sys.argv, "--drop-agent" in sys.argv, pid)
    os_ = our_stacks(ours_file)
    def incl(stacks):
        tot, inc = 0, collections.Counter()
        for w, names in stacks:
            tot += w
            for n in set(names): inc[n] += w
        return tot, inc
    pres = [(w, resolve(f)) for w, f in ps if f]
    ores = [(w, resolve(f, True)) for w, f, _ in os_ if f]
    ptot, pinc = incl(pres)
    otot, oinc = incl(ores)
    def complete(names): return names and names[-1].split(":", 1)[1] in ROOTS
    pc = sum(w for w, n in pres if complete(n)) / max(ptot, 1)
    oc = sum(w for (w, n), (_, _, tr) in zip(ores, [x for x in os_ if x[1]]) if complete(n) and not tr) / max(otot, 1)
    agent = sum(w for w, n in ores if any("libfleetprof" in x for x in n)) / max(otot, 1)
    print(f"{label}: perf {len(pres)} samples, complete {100*pc:.2f}%; ours {len(ores)} samples, complete {100*oc:.2f}%, with libfleetprof frames {100*agent:.2f}%")
    top = [n for n, _ in pinc.most_common() if not n.endswith(":?")][:20]
    # Sampling error of an inclusive share: each stack is a draw; a share's estimate is the
    # weighted mean of the indicator "the stack holds f", whose standard error is
    # sqrt(sum w_i^2 (x_i - p)^2) / sum w_i (perf's samples weigh the same; ours weigh the CPU
    # time since the thread's previous sample). The difference's error is the two combined.
    def se(stacks, tot, f, p):
        return 100 * sum(w * w * ((f in set(n)) - p) ** 2 for w, n in stacks) ** 0.5 / tot
    worst, within, zs = 0, 0, []
    for n in top:
        a, b = 100 * pinc[n] / ptot, 100 * oinc[n] / otot
        sa, sb = se(pres, ptot, n, a / 100), se(ores, otot, n, b / 100)
        sd = (sa * sa + sb * sb) ** 0.5
        z = (b - a) / sd if sd else 0.0
        zs.append(z)
        worst = max(worst, abs(a - b))
        within += abs(a - b) <= 2
        print(f"  {n:60s} perf {a:6.2f}% (se {sa:4.2f})  ours {b:6.2f}% (se {sb:4.2f})  diff {b - a:+6.2f} pp  z {z:+5.1f}")
    print(f"  max |diff| over perf's top 20: {worst:.2f} pp; within 2 pp: {within} of {len(top)}; "
          f"|z| > 3: {sum(abs(z) > 3 for z in zs)}")
    inc = collections.Counter()
    for (w, n), x in zip(ores, [x for x in os_ if x[1]]):
        if not (complete(n) and not x[2]):
            inc[";".join(reversed(n[:6])) + (" [T]" if x[2] else "")] += w
    for k, w in inc.most_common(6):
        print(f"  incomplete {100*w/otot:5.2f}%: {k}")

main()
