"""Model instances and intra-op threads: how auto resolves, and that a
server runs its instances concurrently with the sessions it was told to open."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from serve_support import metric, wait_log
from engine.server.config import parse_config
from engine.server.placement import core_groups, parse_cpulist, plan


@pytest.mark.parametrize("instances, threads, engine_threads, usable, groups, expected", [
    (0, 0, 0, 8, 1, (1, 8)),     # auto: one instance per core group, all threads
    (0, 0, 0, 16, 2, (2, 8)),    # two NUMA nodes
    (0, 0, 4, 16, 2, (2, 2)),    # engine.threads caps what the instances share
    (0, 2, 0, 8, 1, (4, 2)),     # threads given: as many such instances as the cores hold
    (0, 3, 0, 2, 1, (1, 3)),     # never fewer than one
    (3, 0, 0, 8, 1, (3, 2)),     # instances given: threads split between them
    (2, 1, 0, 8, 1, (2, 1)),     # both given: taken as they are
    (4, 0, 2, 8, 1, (4, 1)),     # never fewer than one thread
])
def test_placement_resolves_auto(instances, threads, engine_threads, usable, groups, expected):
    p = plan(instances, threads, engine_threads, usable=usable, groups=groups)
    assert (p.instances, p.threads) == expected


def test_core_groups_from_the_numa_topology(tmp_path):
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    for node, cpus in (("node0", "0-3"), ("node1", "4-7"), ("node2", "")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert core_groups({1, 2, 5}, tmp_path) == [{1, 2}, {5}]
    assert core_groups({1, 2}, tmp_path) == [{1, 2}]           # a node with no usable core is no group
    assert core_groups({0, 1}, tmp_path / "absent") == [{0, 1}]  # no topology: one group


def test_config_takes_auto_and_zero_for_instances_and_threads(tmp_path):
    cfg = parse_config({"models": [{"name": "a", "path": "a.aie", "instances": "auto", "threads": 0},
                                   {"name": "b", "path": "b.aie", "instances": 0}]}, base=tmp_path)
    assert [(m.instances, m.threads) for m in cfg.models] == [(0, 0), (0, 0)]


def test_instances_run_concurrently(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "max_batch_size": 1, "instances": 2,
                             "threads": 1}], plan_cache_size=3, gate=run_gate)
    health = json.loads(server.get("/health")[1])["models"]["m"]
    assert (health["instances"], health["threads_per_instance"]) == (2, 1)
    assert health["plan_cache_size"] is None  # the test session class takes no plan cache size
    config = json.loads(server.get("/v2/models/m/config")[1])
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    x = np.full((1, 16), 0.5, np.float32)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    statuses = []
    threads = [threading.Thread(target=lambda: statuses.append(server.post("/v2/models/m/infer", body)[0]))
               for _ in range(2)]
    for t in threads:
        t.start()
    # Both run at once, each held at the gate: with one instance the second
    # could not start before the first ended, and neither ends until released.
    run_gate.wait_started(2)
    assert metric(server, "aie_queue_depth", model="m") == 0
    run_gate.release(2)
    for t in threads:
        t.join(30)
    assert statuses == [200, 200]
    wait_log(server, "request", count=2, model="m")  # written just after each response
    lines = [r for r in server.logs() if r.get("event") == "request" and r.get("model") == "m"]
    assert sorted(r["instance"] for r in lines) == [0, 1], lines


def test_plan_cache_size_reaches_the_runtime_session(serve_factory, zoo_mlp):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}], plan_cache_size=3)
    health = json.loads(server.get("/health")[1])["models"]["mlp"]
    assert health["plan_cache_size"] == 3
    assert health["instances"] >= 1 and health["threads_per_instance"] == 1  # engine threads: 1 in the tests
