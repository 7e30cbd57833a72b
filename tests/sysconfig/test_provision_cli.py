"""The two front doors: `python -m hostspec provision` (what a remote host
runs on a shipped tree) and `invoke provision`. Exit codes 0 / 1 / 2, one
line per error, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision_support import REPO, hostspec_cli, seeded_tree, snapshot, write_tree_dir

INVOKE = str(Path(REPO) / ".venv" / "bin" / "invoke")
SPEC = str(REPO / "sysconfig" / "spec.yaml")


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([INVOKE, *args], capture_output=True, text=True, timeout=120, cwd=REPO, check=False)


def test_help_documents_every_option():
    done = hostspec_cli("provision", "--help")
    assert done.returncode == 0
    for option in ("--tree DIR", "--spec FILE", "--root ROOT", "--check", "--rollback", "--live", "--no-live"):
        assert option in done.stdout


def test_tree_apply_check_drift_rollback_exit_codes(tmp_path):
    tree = seeded_tree(31)
    tree_dir = write_tree_dir(tree, tmp_path / "tree")
    root = tmp_path / "root"
    args = ["provision", "--tree", str(tree_dir), "--root", str(root)]

    done = hostspec_cli(*args)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-1] == f"{len(tree)} changed, 0 unchanged"
    assert hostspec_cli(*args, "--check").stdout.splitlines()[-1] == f"0 drifted, {len(tree)} in sync"

    rel = sorted(tree)[0]
    (root / rel).write_text("operator was here\n")
    drift = hostspec_cli(*args, "--check")
    assert drift.returncode == 2
    assert "-operator was here" in drift.stdout and f"    drift  file      {rel}: content differs" in drift.stdout

    back = hostspec_cli(*args, "--rollback")
    assert back.returncode == 0 and "restored backup set:" in back.stdout
    assert snapshot(root) == {}


def test_errors_are_one_line_and_change_nothing(tmp_path):
    root = tmp_path / "root"
    cases = {
        ("--tree", str(tmp_path / "missing")): f"error: --tree {tmp_path / 'missing'}: not a directory "
                                               "(expected a tree written by `invoke render`)\n",
        ("--tree", str(tmp_path), "--rollback", "--check"): "error: --rollback and --check cannot be combined: "
                                                            "rollback restores, check only compares\n",
        (): "error: nothing to provision: pass --tree DIR (a rendered tree) or --spec FILE\n",
    }
    for extra, message in cases.items():
        done = hostspec_cli("provision", "--root", str(root), *extra)
        assert (done.returncode, done.stderr, done.stdout) == (1, message, "")
    tree_dir = write_tree_dir(seeded_tree(32), tmp_path / "tree")
    live = hostspec_cli("provision", "--tree", str(tree_dir), "--root", str(root), "--live")
    assert live.returncode == 1 and live.stderr.startswith("error: live provisioning needs the spec (--spec FILE)")
    assert not root.exists()


def test_a_bad_spec_reports_every_problem_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nhost:\n  hugepages:\n    cout: 12\n  transparent_hugepage:\n    enabled: sometimes\n")
    done = hostspec_cli("provision", "--spec", str(bad), "--root", str(tmp_path / "root"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) >= 2 and all(line.startswith(f"error: {bad}:") for line in lines)
    assert any("host.hugepages.cout: unknown key" in line for line in lines)
    assert not (tmp_path / "root").exists()


def test_invoke_provision_overlays_specs_and_checks(tmp_path):
    root = tmp_path / "root"
    site = tmp_path / "site.yaml"
    site.write_text("host:\n  sysctl:\n    net.core.somaxconn: 4242\n")
    listed = invoke("--list")
    assert "provision" in listed.stdout

    done = invoke("provision", "--spec", SPEC, "--spec", str(site), "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert "5 changed, 0 unchanged" in done.stdout
    assert "net.core.somaxconn = 4242" in (root / "etc/sysctl.d/90-ai-engine.conf").read_text()

    assert invoke("provision", "--spec", SPEC, "--spec", str(site), "--root", str(root), "--check").returncode == 0
    drift = invoke("provision", "--root", str(root), "--check")  # the default spec alone: somaxconn differs
    assert drift.returncode == 2 and "-net.core.somaxconn = 4242" in drift.stdout

    bad = invoke("provision", "--spec", str(tmp_path / "nope.yaml"), "--root", str(root))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1
