"""Property tests over random valid specs: rendering is deterministic byte for
byte (twice in one process, and across key order in the source), and the
engine config round-trips through YAML."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostspec.loader import load_spec
from hostspec.render import engine_config, render_tree

SIZES = st.sampled_from(["64M", "256M", "1G", "1.5G", 8 << 20, "512K"])


@st.composite
def specs(draw) -> dict:
    policy = draw(st.sampled_from(["other", "batch", "idle", "fifo", "rr"]))
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), max_size=3, unique=True))
    models = [{"name": n, "source": f"models/{n}.onnx",
               "max_batch_size": draw(st.integers(1, 4096)),
               "memory": draw(st.one_of(st.none(), SIZES)),
               "instances": draw(st.one_of(st.just("auto"), st.integers(1, 8)))} for n in names]
    sysctl_keys = ["vm.swappiness", "net.core.somaxconn", "net.ipv4.tcp_fin_timeout", "kernel.numa_balancing"]
    return {
        "version": 1,
        "host": {
            "hugepages": {"size": draw(st.sampled_from(["2M", "1G"])),
                          "count": draw(st.one_of(st.just("auto"), st.integers(0, 100000))),
                          "headroom": f"{draw(st.integers(0, 200))}%"},
            "transparent_hugepage": {"enabled": draw(st.sampled_from(["never", "madvise", "always"])),
                                     "defrag": draw(st.sampled_from(["always", "defer", "defer+madvise", "madvise",
                                                                     "never"]))},
            "direct_ip_clients": draw(st.booleans()),
            "sysctl": {k: draw(st.integers(0, 1 << 20)) for k in draw(st.lists(st.sampled_from(sysctl_keys),
                                                                                 unique=True))},
            "kernel_cmdline": draw(st.lists(st.sampled_from(["isolcpus=2-7", "nosmt", "mitigations=off"]), unique=True)),
        },
        "service": {
            "cpu_scheduling_policy": policy,
            "cpu_scheduling_priority": draw(st.integers(1, 99)) if policy in ("fifo", "rr") else None,
            "memory_max": draw(st.one_of(SIZES, st.just("infinity"))),
            "cpu_quota": f"{draw(st.integers(1, 6400))}%",
            "restart_sec": draw(st.sampled_from([0, 10, "500ms", "2min"])),
            "hardening": {"protect_system": draw(st.sampled_from(["strict", "full", True, False])),
                          "restrict_realtime": draw(st.booleans())},
        },
        "engine": {"threads": draw(st.one_of(st.just("auto"), st.integers(1, 64))),
                   "arena": {"size": draw(SIZES), "hugepages": draw(st.booleans())},
                   "models": models},
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_render_is_deterministic_and_engine_config_round_trips(data):
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a.yaml"), Path(tmp, "b.yaml")
        a.write_text(yaml.safe_dump(data, sort_keys=False))
        b.write_text(yaml.safe_dump(data, sort_keys=True))  # same data, other key order
        spec_a = load_spec([a])
        first, second = render_tree(spec_a), render_tree(load_spec([a]))
        assert {k: (v.content, v.mode) for k, v in first.items()} == {k: (v.content, v.mode) for k, v in second.items()}
        spec_b = load_spec([b])
        assert spec_b.digest == spec_a.digest
        renamed = {k: v.content.replace(b"/b.yaml", b"/a.yaml") for k, v in render_tree(spec_b).items()}
        assert renamed == {k: v.content for k, v in first.items()}
        assert yaml.safe_load(first["etc/ai-engine/engine.yaml"].content) == engine_config(spec_a)
