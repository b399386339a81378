#!/usr/bin/env python3
"""The same execution of a server seen by the agent and by `perf record -a -C CPU -g` without
dwarf (frame-pointer kernel chains and the sampled user IP only: no 32 KiB stack copy per
sample), compared on a coarse split of the server's CPU: time in write, read, epoll_wait (the
kernel's syscall path, the libc wrapper and the agent's interposer of that call, which the
agent names as the call) and all other user code. perf's samples in the agent's own thread
and handler are left out. bench/RESULTS.md, issue 14 session 9 (h14g), point 6.

  cfi-vs-perf-split.py BUILD_DIR DIR   # DIR/pid, DIR/k.data (perf), DIR/fp/*.fpc (agent)
"""
import collections, os, sys, subprocess
BUILD, D = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
pid = open(D + "/pid").read().strip()
txt = subprocess.run(["perf", "script", "-i", D + "/k.data", "--pid=" + pid, "-F", "comm,ip,sym,dso"], capture_output=True, text=True).stdout
c = collections.Counter(); cur = []; n = 0
WR = {"__GI___libc_write", "__libc_write", "write"}; RD = {"__GI___libc_read", "__libc_read", "read"}
def flush():
    global n
    if not cur: return
    n += 1
    s0, d0 = cur[0]
    if "kernel" in d0:
        syms = [s for s, d in cur]; k = "other (kernel, agent)"
        for s in syms:
            if s in ("ksys_write", "vfs_write", "__x64_sys_write") or s in WR or "libc_write" in s: k = "write"; break
            if s in ("ksys_read", "vfs_read", "__x64_sys_read") or s in RD: k = "read"; break
            if "epoll_wait" in s: k = "epoll_wait"; break
        c[k] += 1
    elif ("libfleetprof" in d0 or "libc" in d0) and s0 in WR | {"write"}: c["write"] += 1
    elif ("libfleetprof" in d0 or "libc" in d0) and s0 in RD | {"read"}: c["read"] += 1
    elif ("libfleetprof" in d0 or "libc" in d0) and "epoll_wait" in s0: c["epoll_wait"] += 1
    elif "libfleetprof" in d0 and s0 not in ("malloc", "free", "malloc_usable_size", "calloc", "realloc"): c["other (kernel, agent)"] += 1
    else: c["user"] += 1
for l in txt.splitlines() + [""]:
    if not l.strip(): flush(); cur = []; continue
    if not l.startswith((" ", "\t")): continue
    p = l.split(None, 1)
    if len(p) < 2: continue
    r = p[1].strip(); sym = r.split()[0].split("+")[0]; dso = r[r.rfind("(")+1:].rstrip(")")
    cur.append((sym, dso))
flush()
subprocess.run(f"{BUILD}/bench/dump-stacks {D}/fp/*.fpc > {D}/ours.txt", shell=True)
src = open(HERE + "/cfi-vs-perf.py").read().replace("\nmain()", "\n")
g = {}; exec(compile(src, "c", "exec"), g)
oc = collections.Counter(); W = 0; N = 0
for w, f, _ in g["our_stacks"](D + "/ours.txt"):
    if not f: continue
    leaf = g["name"](*f[0]).split(":", 1)[1]
    k = {"write": "write", "__GI___libc_write": "write", "read": "read", "__GI___libc_read": "read", "epoll_wait": "epoll_wait"}.get(leaf, "user")
    oc[k] += w; W += w; N += 1
po = n - c["other (kernel, agent)"]
print(f"{D}: perf {n} samples ({c['other (kernel, agent)']} other left out), ours {N}")
for k in ("write", "epoll_wait", "read", "user"):
    a, b = 100 * c[k] / po, 100 * oc[k] / W
    print(f"  {k:12s} perf {a:6.2f}%  ours {b:6.2f}%  diff {b - a:+5.2f}")
