"""`invoke render` end to end: files written, a bad spec gives one line per
problem and exit 1 with no traceback and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(REPO)]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*INVOKE, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_render_writes_the_tree_and_a_summary(tmp_path):
    out = run("render", "--out", str(tmp_path / "rootfs"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for rel in ("etc/sysctl.d/90-ai-engine.conf", "etc/default/grub.d/90-ai-engine.cfg",
                "etc/systemd/system/ai-engine.service", "etc/ai-engine/engine.yaml",
                "opt/ai-engine/libexec/check-host"):
        assert (tmp_path / "rootfs" / rel).is_file(), rel
        assert f"  {rel}  (" in out.stdout
    assert out.stdout.rstrip().endswith("5 files written")


def test_render_overlays_and_reports_bad_specs_on_one_line_each(tmp_path):
    (tmp_path / "base.yaml").write_text("version: 1\nengine:\n  http_port: 8000\n")
    (tmp_path / "site.yaml").write_text("engine:\n  http_prot: 9000\n  arena:\n    size: 4X\n")
    out = run("render", "--spec", "base.yaml", "--spec", "site.yaml", "--out", "rootfs", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "site.yaml:2: engine.http_prot: unknown key (did you mean 'http_port'?)",
        "site.yaml:4: engine.arena.size: bad size '4X' (expected a size like 512M, 4G or 1.5T "
        "(K, M, G, T = 1024-based) or a whole number of bytes)",
        "render: 2 problem(s) in the spec; nothing written",
    ]
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "rootfs").exists()


def test_render_refuses_the_real_root(tmp_path):
    out = run("render", "--out", "/", cwd=tmp_path)
    assert out.returncode == 1 and "refusing to write into /" in out.stderr


def test_render_help_documents_every_option(tmp_path):
    out = run("--help", "render", cwd=tmp_path)
    assert out.returncode == 0
    assert "--spec" in out.stdout and "--out" in out.stdout and "build/rootfs" in out.stdout
