"""The fleet runner's policy (no hosts needed): concurrency cap, canary first,
stop launching past max_fail_fraction, one failure never stops the others."""

from __future__ import annotations

import threading
import time

from engine.deploy import DeployError
from engine.deploy.targets import HostResult, Settings, Target, run_fleet


class Probe:
    """Records when each host ran and how many ran at once."""

    def __init__(self, fail: set[str], seconds: float = 0.05):
        self.fail, self.seconds = fail, seconds
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.order: list[str] = []

    def __call__(self, target: Target) -> HostResult:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.order.append(target.name)
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        if target.name in self.fail:
            raise DeployError("boom", where=target.name)
        return HostResult(target.name, "deployed")


def _targets(n: int) -> list[Target]:
    return [Target(f"t{i}", "/", Settings()) for i in range(n)]


def test_cap_is_respected_and_failures_stay_local():
    probe = Probe(fail={"t2"})
    results = run_fleet(_targets(8), probe, Settings(parallel=3, max_fail_fraction=0.5))
    assert probe.peak == 3
    assert [r.status for r in results] == ["deployed"] * 2 + ["failed"] + ["deployed"] * 5
    assert results[2].reason == "t2: boom"


def test_canary_runs_alone_first_and_its_failure_stops_the_rollout():
    probe = Probe(fail={"t3"})
    results = run_fleet(_targets(5), probe, Settings(parallel=4, canary="t3"))
    assert probe.order == ["t3"]
    assert results[3].status == "failed"
    assert {r.status for i, r in enumerate(results) if i != 3} == {"skipped"}
    assert results[0].reason == "not started: canary t3 failed"


def test_no_new_hosts_once_too_many_failed():
    probe = Probe(fail={"t0", "t1"})
    results = run_fleet(_targets(6), probe, Settings(parallel=1, max_fail_fraction=0.2))
    # 1 of 6 failed (0.17) is tolerated, the 2nd (0.33) stops the launches.
    assert probe.order == ["t0", "t1"]
    assert [r.status for r in results] == ["failed", "failed"] + ["skipped"] * 4
    assert "2 of 6 hosts failed" in results[5].reason
