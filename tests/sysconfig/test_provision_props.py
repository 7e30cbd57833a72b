"""Properties over random valid specs (real load_spec + render_tree):
provision twice ⇒ the second run changes nothing; check after provision ⇒
in sync; a hand edit ⇒ drift with a diff; rollback ⇒ the previous state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provision_support import snapshot

from hostspec.loader import load_spec
from hostspec.provision import provision, rollback

THP = st.sampled_from(["never", "madvise", "always"])
DEFRAG = st.sampled_from(["always", "defer", "defer+madvise", "madvise", "never"])


@st.composite
def specs(draw) -> dict:
    return {
        "version": 1,
        "host": {
            "hugepages": {"size": "2M", "count": draw(st.one_of(st.integers(0, 4096), st.just("auto")))},
            "transparent_hugepage": {"enabled": draw(THP), "defrag": draw(DEFRAG)},
            "direct_ip_clients": draw(st.booleans()),
            "sysctl": {
                "net.core.somaxconn": draw(st.integers(128, 65535)),
                "net.ipv4.tcp_fin_timeout": draw(st.integers(1, 120)),
                "vm.swappiness": draw(st.integers(0, 100)),
            },
        },
        "service": {
            "memory_max": draw(st.sampled_from(["512M", "2G", "4G", "1.5T"])),
            "cpu_quota": f"{draw(st.integers(1, 32)) * 100}%",
            "limit_nofile": draw(st.integers(1024, 1 << 20)),
            "restart_sec": draw(st.integers(1, 60)),
        },
    }


def load(directory: Path, name: str, data: dict):
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec([path])


def contents(root: Path) -> dict:
    return {rel: (data, mode) for rel, (data, mode, _) in snapshot(root).items()}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=specs(), second=specs(), line=st.integers(0, 10))
def test_provision_is_idempotent_checkable_and_reversible(first, second, line):
    with tempfile.TemporaryDirectory(prefix="aie-provision-prop-") as tmp:
        tmp = Path(tmp)
        root = tmp / "root"
        spec1, spec2 = load(tmp, "first", first), load(tmp, "second", second)

        report = provision(spec1, root, live=False)
        assert report.count("changed") == 5 and not report.failed
        state1, stamped = contents(root), snapshot(root)
        again = provision(spec1, root, live=False)
        assert again.count("changed") == 0 and again.backup_set is None
        assert snapshot(root) == stamped  # mtimes too: nothing was rewritten
        check = provision(spec1, root, check=True, live=False)
        assert not check.drifted and check.count("in-sync") == 5

        changed2 = provision(spec2, root, live=False).count("changed")
        state2 = contents(root)
        rel = "etc/systemd/system/ai-engine.service"
        target = root / rel
        lines = target.read_text().splitlines(keepends=True)
        lines.insert(min(line, len(lines)), "# hand edit by an operator\n")
        target.write_text("".join(lines))

        drift = provision(spec2, root, check=True, live=False)
        assert drift.drifted
        (item,) = [i for i in drift.items if i.status == "drift"]
        assert item.name == rel and "-# hand edit by an operator" in item.diff

        rollback(root, live=False)
        # With no difference between the specs the second provision saved no
        # set, so the rollback undoes the first one instead.
        assert contents(root) == (state1 if changed2 else {})
        assert (state2 != state1) == bool(changed2)
