"""What makes the tail of each bench_deadlines cell, from the server's own
trace (bench_deadlines.py --trace DIR; engine.server.scheduler writes it):

    .venv/bin/python benchmarks/deadline_trace.py DIR

Per pattern and cell, on the server's clock (arrival to answer; the client
adds the connection's own delay): p50/p99, the batches the window held back
and their mean wait, the mean idle gap between a batch's end and the next
one's start while work was queued (the loop's per-batch overhead when the
batch was not held back), and of the requests at or above the cell's p99:
the share whose own batch was held back, whose time in the queue overlapped
another batch's hold (the queue behind a wait), whose batch computed over
twice its size's median (the host), and that were answered 504.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(requests: arrival, started, done, status, batch, waited), (batches: start, end, items, seconds, waited, head)."""
    reqs, batches = [], []
    for line in path.read_text().splitlines():
        kind, *v = line.split()
        (reqs if kind == "R" else batches).append([float(x) for x in v])
    return np.array(reqs).reshape(-1, 6), np.array(batches).reshape(-1, 6)


def cell(reqs: np.ndarray, batches: np.ndarray) -> dict:
    lat = reqs[:, 2] - reqs[:, 0]
    p99 = np.percentile(lat, 99)
    tail = reqs[lat >= p99]
    held = batches[batches[:, 4] > 0]
    holds = np.stack([held[:, 0] - held[:, 4], held[:, 0]], axis=1)   # [from, to] of each hold

    def behind(r) -> bool:   # queued during another batch's hold (not its own batch's)
        end = r[1] if r[1] > 0 else r[2]   # started 0: refused or expired before it ran
        return bool(np.any((holds[:, 0] < end) & (holds[:, 1] > r[0]) & (holds[:, 1] != r[1])))
    median = {b: np.median(batches[batches[:, 2] == b, 3]) for b in np.unique(batches[:, 2])}
    slow_at = {s: True for s, b, c in zip(batches[:, 0], batches[:, 2], batches[:, 3]) if c > 2 * median[b]}
    order = np.argsort(batches[:, 0])
    b = batches[order]
    queued = b[1:, 5] < b[:-1, 1]      # the next head arrived before this batch ended: the instance had work
    gaps = (b[1:, 0] - b[:-1, 1])[queued & (b[1:, 4] == 0)]
    n = max(1, len(tail))
    return {"n": len(reqs), "p50": np.percentile(lat, 50) * 1e3, "p99": p99 * 1e3,
            "held": len(held) / max(1, len(batches)), "hold_us": held[:, 4].mean() * 1e6 if len(held) else 0.0,
            "batch": reqs[reqs[:, 3] == 200, 4].mean() if len(reqs) else 0.0,
            "gap_us": gaps.mean() * 1e6 if len(gaps) else 0.0,
            "busy": batches[:, 3].sum() / max(1e-9, batches[:, 1].max() - batches[:, 0].min()) if len(b) else 0.0,
            "tail_own": sum(r[5] > 0 for r in tail) / n, "tail_behind": sum(behind(r) for r in tail) / n,
            "tail_slow": sum(slow_at.get(r[1], False) for r in tail) / n, "tail_504": sum(r[3] != 200 for r in tail) / n}


def main(argv=None) -> int:
    d = Path((argv or sys.argv[1:])[0])
    spans = [(p, float(a), float(b)) for p, a, b in (ln.split() for ln in (d / "patterns").read_text().splitlines())]
    traces = {f.stem: load(f) for f in sorted(d.glob("*.trace")) if f.stem != "calibrate"}
    print("| pattern | cell | n | p50 ms | p99 ms | mean batch | held back | mean hold us | idle gap us (not held) "
          "| compute / span | tail: own batch held | behind a hold | slow batch | 504 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pattern, lo, hi in spans:
        for name, (reqs, batches) in traces.items():
            r = reqs[(reqs[:, 0] >= lo) & (reqs[:, 0] < hi)]
            b = batches[(batches[:, 0] >= lo) & (batches[:, 0] < hi)]
            if not len(r):
                continue
            c = cell(r, b)
            print(f"| {pattern} | {name} | {c['n']} | {c['p50']:.2f} | {c['p99']:.2f} | {c['batch']:.2f} "
                  f"| {c['held']:.1%} | {c['hold_us']:.0f} | {c['gap_us']:.0f} | {c['busy']:.2f} | {c['tail_own']:.0%} "
                  f"| {c['tail_behind']:.0%} | {c['tail_slow']:.0%} | {c['tail_504']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
