"""benchmarks/deadline_trace.py: what the server's trace says made a cell's
p99 tail -- its own batch held back by the window, queued behind another
batch's hold, a slow batch -- on a synthetic trace written in the format
engine.server.scheduler writes (AIE_SCHED_TRACE)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import deadline_trace as dt  # noqa: E402


def write_trace(path, fast: int = 396):
    """`fast` requests alone in 4 ms batches, then a batch held back 10 ms
    (two requests), two requests queued during that hold, and one batch
    that computed 5x its size's median."""
    lines, t = [], 100.0
    for _ in range(fast):
        lines += [f"R {t:.6f} {t:.6f} {t + 0.004:.6f} 200 1 0", f"B {t:.6f} {t + 0.004:.6f} 1 0.004 0 {t:.6f}"]
        t += 0.01
    # held: its head arrived at t, the instance was free, it left at t + 0.010
    held_start = t + 0.010
    lines += [f"R {t:.6f} {held_start:.6f} {held_start + 0.005:.6f} 200 2 0.010000",
              f"R {t + 0.001:.6f} {held_start:.6f} {held_start + 0.005:.6f} 200 2 0.010000",
              f"B {held_start:.6f} {held_start + 0.005:.6f} 2 0.005 0.010000 {t:.6f}"]
    behind = held_start + 0.005
    lines += [f"R {t + 0.002:.6f} {behind:.6f} {behind + 0.005:.6f} 200 2 0",
              f"R {t + 0.003:.6f} {behind:.6f} {behind + 0.005:.6f} 200 2 0",
              f"B {behind:.6f} {behind + 0.005:.6f} 2 0.005 0 {t + 0.002:.6f}"]
    slow = behind + 0.1
    lines += [f"R {slow:.6f} {slow:.6f} {slow + 0.020:.6f} 200 1 0", f"B {slow:.6f} {slow + 0.020:.6f} 1 0.020 0 {slow:.6f}"]
    path.write_text("\n".join(lines) + "\n")


def test_the_tail_is_split_into_held_back_behind_a_hold_and_slow_batches(tmp_path):
    write_trace(tmp_path / "wauto.trace")
    reqs, batches = dt.load(tmp_path / "wauto.trace")
    c = dt.cell(reqs, batches)
    assert c["n"] == 401
    assert c["held"] == pytest.approx(1 / 399)
    assert c["hold_us"] == pytest.approx(10_000)
    # The five slowest (>= p99 of 401): two held back, two behind the hold, one slow batch.
    assert c["tail_own"] == pytest.approx(2 / 5)
    assert c["tail_behind"] == pytest.approx(2 / 5)
    assert c["tail_slow"] == pytest.approx(1 / 5)
    assert c["tail_504"] == 0


def test_the_report_reads_the_patterns_span_on_the_servers_clock(tmp_path, capsys):
    write_trace(tmp_path / "wauto.trace")
    (tmp_path / "patterns").write_text("steady 99.0 200.0\nsine 300.0 400.0\n")
    assert dt.main([str(tmp_path)]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| steady")]
    assert len(rows) == 1 and "| wauto | 401 |" in rows[0]
