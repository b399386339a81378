#!/usr/bin/env python3
"""Over-dispersion of per-chunk sample counts (bench/chunk-dispersion.sh).

Input lines: "<chunk file> <leaf function> <count>", the file named <service>-<pid>-<seq>.fpc.
Per process, chunks are merged k at a time (k = 1, 4, 16, 48: replicates of growing size);
per function, Pearson's X^2 of its replicate counts around the process's share, binomial given
the replicate's total (X^2 / df = 1 under Poisson sampling; a multiplicative mix spread alpha
adds alpha mu). Pooled over diff-service's five functions (df ~4/5 of the sum: their shares
sum to 1). Also X^2 / df between the processes' totals."""
import collections
import sys

FNS = ["parse", "route", "render", "compress", "hash"]


def load(path):
    rep = collections.defaultdict(collections.Counter)
    for line in open(path):
        f, leaf, c = line.split()
        rep[f][leaf] += float(c)
    unit = 1000.0 if all(v % 1000 == 0 for r in rep.values() for v in r.values()) else 1.0
    proc = collections.defaultdict(list)
    for f in sorted(rep):
        proc[f.split("-")[-2]].append(f)
    return rep, unit, proc


def pearson(reps):
    """X^2 and df of each function's counts in reps [(total, {fn: count})], and its mus."""
    x2, df, mus = 0.0, 0, []
    total = sum(c for c, _ in reps)
    for fn in FNS:
        p = sum(y[fn] for _, y in reps) / total
        if not 0 < p < 1:
            continue
        for c, y in reps:
            x2 += (y[fn] - p * c) ** 2 / (p * c * (1 - p))
            mus.append(p * c)
        df += len(reps) - 1
    return x2, df, mus


def main():
    rep, unit, proc = load(sys.argv[1])

    def as_rep(files):
        return (sum(sum(rep[f].values()) for f in files) / unit,
                {fn: sum(rep[f][fn] for f in files) / unit for fn in FNS})

    print("%d processes, %d chunks" % (len(proc), len(rep)))
    for k in (1, 4, 16, 48):
        x2, df, mus = 0.0, 0, []
        for files in proc.values():
            files = [f for f in files if sum(rep[f].values()) / unit >= 5]
            reps = [as_rep(files[i:i + k]) for i in range(0, len(files) - k + 1, k)]
            if len(reps) >= 2:
                a, b, m = pearson(reps)
                x2, df, mus = x2 + a, df + b, mus + m
        if not df:
            continue
        dfe, mbar = df * 4 / 5, sum(m * m for m in mus) / sum(mus)
        d, sd = x2 / df, (2 / dfe) ** 0.5
        print("%2d chunks per replicate (~%5.0f samples): X^2/df %.3f +- %.3f (df ~%d), "
              "alpha %.5f +- %.5f" % (k, sum(mus) / len(mus) * len(FNS), d, sd, dfe,
                                      (d - 1) / mbar, sd / mbar))
    x2, df, _ = pearson([as_rep(files) for files in proc.values()])
    if df:
        print("between processes: X^2/df %.3f +- %.3f (df ~%d)"
              % (x2 / df, (2 / (df * 4 / 5)) ** 0.5, df * 4 / 5))


if __name__ == "__main__":
    main()
