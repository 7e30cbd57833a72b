"""The rendered files run for real: the GRUB drop-in sourced by bash and dash,
the unit through `systemd-analyze verify`, check-host against fake and real
/proc and /sys trees."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from hostspec.hugepages import hugepage_plan
from hostspec.loader import load_spec
from hostspec.render import render_tree, write_tree

GOLDEN = Path(__file__).parent / "golden"
TUNED = [GOLDEN / "tuned" / "spec.yaml", GOLDEN / "tuned" / "site.yaml"]
SAMPLE_GRUB = """\
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"
GRUB_CMDLINE_LINUX="console=ttyS0,115200 hugepages=16 transparent_hugepage=always isolcpus=1 net.ifnames=0 glob*"
"""


def _source_grub(shell: str, tmp_path: Path, dropin: bytes, times: int, grub: str = SAMPLE_GRUB) -> tuple[str, str]:
    (tmp_path / "grub").write_text(grub)
    (tmp_path / "dropin.cfg").write_bytes(dropin)
    (tmp_path / "globbait-file").write_text("")  # an unquoted glob* would expand to this
    script = ". ./grub\n" + ". ./dropin.cfg\n" * times + \
        'printf "%s\\n" "$GRUB_CMDLINE_LINUX"; printf "%s\\n" "$GRUB_CMDLINE_LINUX_DEFAULT"\n'
    out = subprocess.run([shell, "-euc", script], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=10)
    linux, default = out.stdout.splitlines()
    return linux, default


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize("times", [1, 2])
def test_grub_dropin_appends_each_argument_exactly_once(shell, times, tmp_path):
    if not shutil.which(shell):
        pytest.skip(f"{shell} not installed")
    spec = load_spec(TUNED)
    dropin = render_tree(spec)["etc/default/grub.d/90-ai-engine.cfg"].content
    linux, default = _source_grub(shell, tmp_path, dropin, times)
    args = linux.split()
    assert args == ["console=ttyS0,115200", "net.ifnames=0", "glob*", "default_hugepagesz=1G", "hugepagesz=1G",
                    "hugepages=0:4,1:4", "transparent_hugepage=madvise", "isolcpus=2-7", "nohz_full=2-7", "nosmt"]
    for key in ("default_hugepagesz=", "hugepagesz=", "hugepages=", "transparent_hugepage=", "isolcpus="):
        assert sum(a.startswith(key) for a in args) == 1, key
    assert default == "quiet splash", "GRUB_CMDLINE_LINUX_DEFAULT must be left alone"


def test_grub_dropin_with_no_existing_cmdline(tmp_path):
    dropin = render_tree(load_spec())["etc/default/grub.d/90-ai-engine.cfg"].content
    linux, _ = _source_grub("bash", tmp_path, dropin, 2, grub="GRUB_CMDLINE_LINUX_DEFAULT=\n")
    assert linux == "default_hugepagesz=2M hugepagesz=2M hugepages=1024 transparent_hugepage=never"


def _systemd_root(tmp_path: Path, unit: bytes) -> Path:
    """A root holding the unit, its executables and the stock target units, so that
    `systemd-analyze verify --root` checks everything and warns about nothing else."""
    root = tmp_path / "root"
    for exe in ("opt/ai-engine/libexec/check-host", "opt/ai-engine/current/venv/bin/ai-engine", "bin/kill"):
        (root / exe).parent.mkdir(parents=True, exist_ok=True)
        (root / exe).write_text("#!/bin/sh\n")
        (root / exe).chmod(0o755)
    system = Path("/usr/lib/systemd/system")
    shutil.copytree(system, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/ai-engine.service").write_bytes(unit)
    return root


def _verify(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}", "ai-engine.service"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", ["default", "tuned"])
def test_unit_passes_systemd_analyze_verify_without_warnings(case, tmp_path):
    if not shutil.which("systemd-analyze") or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze or the stock systemd units are not installed (apt-get install systemd)")
    spec = load_spec(TUNED if case == "tuned" else None)
    unit = render_tree(spec)["etc/systemd/system/ai-engine.service"].content
    text = unit.decode()
    assert "MemoryMax=" in text and "MemoryLimit" not in text
    assert "ExecReload=/bin/kill -HUP $MAINPID" in text
    assert "ExecStartPre=/opt/ai-engine/libexec/check-host" in text
    assert bool(re.search(r"^RestrictRealtime=", text, re.M)) == (case == "default")
    result = _verify(_systemd_root(tmp_path, unit))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_systemd_analyze_check_is_real(tmp_path):
    """The verify harness does catch problems: a deprecated and an unknown key warn."""
    if not shutil.which("systemd-analyze") or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze or the stock systemd units are not installed (apt-get install systemd)")
    unit = render_tree(load_spec())["etc/systemd/system/ai-engine.service"].content
    bad = unit.replace(b"MemoryMax=", b"MemoryLimit=").replace(b"LimitNOFILE=", b"LimitNOFLIE=")
    out = _verify(_systemd_root(tmp_path, bad))
    assert "please use MemoryMax=" in out.stderr and "Unknown key 'LimitNOFLIE'" in out.stderr


def _fake_sys(root: Path, page_kb: int, total: int, free: int, resv: int, thp: str, defrag: str) -> Path:
    hp = root / f"kernel/mm/hugepages/hugepages-{page_kb}kB"
    hp.mkdir(parents=True)
    for name, value in (("nr_hugepages", total), ("free_hugepages", free), ("resv_hugepages", resv)):
        (hp / name).write_text(f"{value}\n")
    t = root / "kernel/mm/transparent_hugepage"
    t.mkdir(parents=True)
    (t / "enabled").write_text(thp + "\n")
    (t / "defrag").write_text(defrag + "\n")
    return root


def _run_check_host(tmp_path: Path, spec_paths, sys_root: Path | None, memlock_kb: str | None = None):
    tree = render_tree(load_spec(spec_paths))
    write_tree(tree, tmp_path / "out")
    script = tmp_path / "out/opt/ai-engine/libexec/check-host"
    env = dict(os.environ)
    if sys_root is not None:
        env["AIE_SYS"] = str(sys_root)
    cmd = [str(script)] if memlock_kb is None else ["sh", "-c", f'ulimit -l {memlock_kb} && exec "$0"', str(script)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=10)


def test_check_host_passes_on_a_host_in_shape(tmp_path):
    sys_root = _fake_sys(tmp_path / "sys", 2048, total=1024, free=1000, resv=0,
                         thp="always madvise [never]", defrag="always defer defer+madvise madvise [never]")
    out = _run_check_host(tmp_path, None, sys_root)
    assert out.returncode == 0, out.stdout
    assert out.stdout.splitlines() == [
        "ok: hugepages: 1000 of 1024 2048 kB pages free, the engine needs 128",
        "ok: THP enabled: never", "ok: THP defrag: never", "ok: memlock: the arena is not locked"]


def test_check_host_prints_one_fix_per_failure(tmp_path):
    sys_root = _fake_sys(tmp_path / "sys", 2048, total=64, free=64, resv=0,
                         thp="[always] madvise never", defrag="always defer defer+madvise [madvise] never")
    out = _run_check_host(tmp_path, None, sys_root)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "FAIL: hugepages: 64 2048 kB pages reserved, the engine needs 128",
        "  fix: echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        "FAIL: THP enabled: always, spec wants never",
        "  fix: echo never > /sys/kernel/mm/transparent_hugepage/enabled",
        "FAIL: THP defrag: madvise, spec wants never",
        "  fix: echo never > /sys/kernel/mm/transparent_hugepage/defrag",
        "ok: memlock: the arena is not locked"]


def test_check_host_counts_reserved_pages_as_taken_and_checks_memlock(tmp_path):
    sys_root = _fake_sys(tmp_path / "sys", 1048576, total=8, free=3, resv=2,
                         thp="always [madvise] never", defrag="always defer [defer+madvise] madvise never")
    out = _run_check_host(tmp_path, TUNED, sys_root, memlock_kb="1024")  # lowering works unprivileged
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "FAIL: hugepages: 1 of 8 1048576 kB pages free, the engine needs 2",
        "  fix: echo 9 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
        "ok: THP enabled: madvise", "ok: THP defrag: defer+madvise",
        "FAIL: memlock: limit 1024 KiB is below the arena (1048576 KiB)",
        "  fix: ulimit -l unlimited  (under systemd: LimitMEMLOCK from service.limit_memlock)"]


def test_check_host_on_this_machine(tmp_path):
    """Against the real /sys: each verdict must agree with what Python reads there."""
    out = _run_check_host(tmp_path, None, None)
    plan = hugepage_plan(load_spec())
    hp = Path(f"/sys/kernel/mm/hugepages/hugepages-{plan.page_size // 1024}kB")
    lines = out.stdout.splitlines()
    if hp.is_dir():
        total, free, resv = (int((hp / n).read_text()) for n in ("nr_hugepages", "free_hugepages", "resv_hugepages"))
        hugepages_ok = total >= plan.need_pages and free - resv >= plan.need_pages
        assert lines[0].startswith("ok: hugepages" if hugepages_ok else "FAIL: hugepages"), lines
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        mode = re.search(r"\[(.*)\]", thp.read_text()).group(1)
        want = "ok: THP enabled: never" if mode == "never" else f"FAIL: THP enabled: {mode}, spec wants never"
        assert want in lines, lines
    failed = any(line.startswith("FAIL") for line in lines)
    assert out.returncode == (1 if failed else 0), out.stdout + out.stderr
    assert out.stderr == ""
