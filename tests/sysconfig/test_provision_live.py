"""Live provision end to end from a real spec: `python -m hostspec provision
--live` into a temp root, run inside a network namespace this test creates.
The spec's net.* sysctls change only that namespace; its hugepage count and
THP modes equal the host's current ones, so nothing global moves (asserted).
Then --check and --rollback in the same namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from aie_testing import require_root
from provision_support import PYTHON, REPO, hostspec_cli

from hostspec.live_kernel import normalize, read_knob, sysctl_rel, thp_knobs

PROC, SYS = Path("/proc"), Path("/sys")
WANT = {"net.core.somaxconn": 1357, "net.ipv4.tcp_fin_timeout": 17}


def host_state() -> dict:
    state = {k: normalize((PROC / sysctl_rel(k)).read_text()) for k in WANT}
    state["hugepages"] = normalize((SYS / "kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text())
    state["thp"] = [read_knob(k, PROC, SYS) for k in thp_knobs("x", "x")]
    return state


def namespace_spec(path: Path) -> Path:
    """A spec that leaves every global knob where it is on this host."""
    enabled, defrag = [read_knob(k, PROC, SYS) for k in thp_knobs("x", "x")]
    count = int((SYS / "kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text())
    spec = {
        "version": 1,
        "host": {"hugepages": {"size": "2M", "count": count},
                 "transparent_hugepage": {"enabled": enabled, "defrag": defrag},
                 "sysctl": WANT},
        "engine": {"arena": {"hugepages": False}},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


CHILD = """
    import contextlib, io, json, sys
    from pathlib import Path
    from hostspec.__main__ import main
    from hostspec.live_kernel import normalize, sysctl_rel
    spec, root, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
    def run(*extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["provision", "--spec", spec, "--root", root, "--live", *extra])
        return [rc, out.getvalue()]
    def values():
        return {k: normalize(Path("/proc", sysctl_rel(k)).read_text()) for k in keys}
    result = {"before": values(), "apply": run(), "after": values(), "again": run(), "check": run("--check"),
              "rollback": run("--rollback"), "restored": values()}
    print(json.dumps(result))
"""


def test_live_provision_check_rollback_inside_a_network_namespace(tmp_path):
    require_root()
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed; cannot create a network namespace")
    if not (SYS / "kernel/mm/hugepages/hugepages-2048kB").is_dir() or not (SYS / "kernel/mm/transparent_hugepage").is_dir():
        pytest.skip("this kernel lacks 2 MiB hugepages or THP sysfs; the namespace spec cannot mirror the host")
    spec = namespace_spec(tmp_path / "ns.yaml")
    root = tmp_path / "root"
    host_before = host_state()
    done = subprocess.run(["unshare", "--net", PYTHON, "-c", textwrap.dedent(CHILD), str(spec), str(root), *WANT],
                          capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert host_state() == host_before, "live provision inside the namespace moved a host-wide value"

    rc, text = out["apply"]
    assert rc == 0, text
    assert out["after"] == {k: str(v) for k, v in WANT.items()}
    for key in WANT:
        assert f"  changed  sysctl    {key}: {out['before'][key]} -> {WANT[key]}" in text
    assert "not rebooted since cmdline change: running kernel lacks default_hugepagesz=2M" in text
    assert f"root {root} is not /: boot config not regenerated" in text
    assert f"root {root} is not /: daemon-reload skipped" in text
    # 5 files + 2 sysctls changed; vm.nr_hugepages and both THP modes were
    # already as wanted; notes: cmdline, GRUB, systemd, service account.
    assert text.splitlines()[-1] == "7 changed, 3 unchanged, 4 notes"

    rc, text = out["again"]
    assert rc == 0 and text.splitlines()[-1] == "0 changed, 10 unchanged, 2 notes", text
    assert "backup set:" not in text

    # The running kernel was not booted with the drop-in's arguments, so the
    # host is honestly out of line with the spec until a reboot.
    rc, text = out["check"]
    assert rc == 2, text
    assert "    drift  cmdline   /proc/cmdline: not rebooted since cmdline change" in text
    assert text.splitlines()[-1] == "1 drifted, 10 in sync"

    rc, text = out["rollback"]
    assert rc == 0, text
    assert out["restored"] == out["before"]
    assert not (root / "etc/sysctl.d/90-ai-engine.conf").exists()


def test_live_provision_without_root_is_refused(tmp_path):
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop root for this test")
    tmp_path = Path(tempfile.mkdtemp(prefix="aie-provision-nonroot-"))  # pytest's tmp_path is 0700: unreadable once we drop root
    tmp_path.chmod(0o755)
    spec = namespace_spec(tmp_path / "ns.yaml")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    done = hostspec_cli("provision", "--spec", str(spec), "--root", str(tmp_path / "r"), "--live", prefix=prefix)
    assert done.returncode == 1
    assert done.stderr == (f"error: live provisioning of {tmp_path / 'r'} changes kernel settings, the boot config and "
                           "system accounts and needs root (run it with sudo), or pass --root DIR to install the files "
                           "into a directory\n")
    assert not (tmp_path / "r").exists()
    shutil.rmtree(tmp_path)


def test_host_check_errors_stop_live_provision_before_anything_changes(tmp_path):
    require_root()
    spec = tmp_path / "huge.yaml"
    spec.write_text("version: 1\nhost:\n  hugepages:\n    size: 2M\n    count: 4000000\n")
    root = tmp_path / "root"
    before = host_state()
    done = hostspec_cli("provision", "--spec", str(spec), "--root", str(root), "--live")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: {spec}:5: host.hugepages.count: 4000000 pages of 2M (")
    assert "exceed this host's memory" in done.stderr and done.stderr.count("\n") == 1
    assert not root.exists() and host_state() == before
