"""Real engines behind a real HAProxy, configured by the rendered
haproxy.cfg (issue 14): a rollout that drains each host through the runtime
API answers every request of a steady stream, over HTTP and the binary
protocol; a host killed with SIGKILL costs at most the requests in flight on
it, none after HAProxy marks it down.

Topology and streams: fleet_support (three engines on 127.0.0.2-4, HAProxy
on 127.0.0.1). Every answer is checked against the model in float64."""

from __future__ import annotations

import signal
import time

import pytest

from fleet_support import ENGINES, fleet, needs_haproxy, start_streams, stop_streams  # noqa: F401 (a fixture)

pytestmark = needs_haproxy


@pytest.mark.parametrize("protocol", ["http", "binary"])
def test_a_rollout_that_drains_each_host_fails_no_request(fleet, protocol):
    streams = start_streams(fleet, protocol, 20)
    t0 = time.monotonic()
    for name in ENGINES:
        # What deploy does per host: drain, wait for its connections, restart, re-enable.
        fleet.api.set_state(name, "drain")
        if protocol == "http":
            assert fleet.api.wait_drained(name, timeout_s=10), fleet.api.server(name)
        old = fleet.engines[name]
        assert old.stop() == 0        # SIGTERM: the engine answers what it holds (binary: then GOODBYE)
        fleet.engines[name] = fleet.start_engine(name)
        fleet.api.set_state(name, "ready")
        assert fleet.api.wait_status(name, "UP", 10), fleet.api.server(name)
        for s in streams:
            s.wait_answers(10)        # traffic flows between hosts
    rollout_s = time.monotonic() - t0
    stop_streams(streams)
    total = sum(s.ok for s in streams)
    print(f"\nrollout of 3 hosts under a steady {protocol} stream: {total} answers, "
          f"{sum(len(s.failures) for s in streams)} failed, {rollout_s:.1f} s")
    assert [f for s in streams for f in s.failures] == []
    assert total >= 2 * (20 + 3 * 10)


def test_a_killed_host_costs_at_most_its_requests_in_flight(fleet):
    streams = start_streams(fleet, "http", 20)
    fleet.engines["e2"].proc.send_signal(signal.SIGKILL)
    assert fleet.api.wait_status("e2", "DOWN", 10), fleet.api.server("e2")
    failed_before_down = sum(len(s.failures) for s in streams)
    for s in streams:
        s.wait_answers(50)            # after HAProxy marked it down: none may fail
    stop_streams(streams)
    failed = sum(len(s.failures) for s in streams)
    print(f"\nkill -9 of one of 3 hosts: {failed_before_down} failed before it was marked down, "
          f"{failed - failed_before_down} after; {sum(s.ok for s in streams)} answers")
    assert failed_before_down <= len(streams)        # at most one request in flight per client
    assert failed == failed_before_down
