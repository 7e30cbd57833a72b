"""GRUB tool detection, systemd reload and the service account, against the
real tools: useradd runs for real inside a mount namespace whose /etc is a
copy, so the host's passwd is never written."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from aie_testing import require_root
from provision_support import PYTHON, REPO

from hostspec import live_system


def _tools(directory: Path, *names: str) -> str:
    directory.mkdir(exist_ok=True)
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return str(directory)


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        (("update-grub", "grub2-mkconfig", "grubby"), ["update-grub"]),
        (("grub2-mkconfig", "grubby"), ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]),
        (("grub-mkconfig",), ["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]),
        (("grubby",), ["grubby", "--update-kernel=ALL", "--args=hugepages=8 transparent_hugepage=never"]),
    ],
)
def test_grub_tool_detection_prefers_the_distribution_tool(tmp_path, present, expected):
    path = _tools(tmp_path / "bin", *present)
    assert live_system.grub_command(["hugepages=8", "transparent_hugepage=never"], path) == expected


def test_no_grub_tool_gives_a_clear_note(tmp_path):
    result = live_system.regenerate_grub("etc/default/grub.d/90-ai-engine.cfg", [], check=False,
                                         path=_tools(tmp_path / "empty"))
    assert result.status == "note"
    assert result.detail.startswith("no GRUB tool found (update-grub, grub2-mkconfig, grub-mkconfig, grubby)")


def test_a_failing_grub_tool_is_reported_with_its_message(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "update-grub").write_text("#!/bin/sh\necho 'grub-probe: error: cannot find a device for /' >&2\nexit 1\n")
    (bin_dir / "update-grub").chmod(0o755)
    command = live_system.grub_command([], str(bin_dir))
    ok, detail = live_system.run_tool([str(bin_dir / command[0])])
    assert not ok
    assert detail == f"{bin_dir / 'update-grub'} exited 1: grub-probe: error: cannot find a device for /"


def test_daemon_reload_depends_on_what_pid_1_really_is():
    init = live_system.pid1_name(Path("/proc"))
    result = live_system.daemon_reload("etc/systemd/system/ai-engine.service", Path("/proc"), check=True)
    if init == "systemd":
        assert (result.status, result.detail) == ("drift", "unit changed: systemctl daemon-reload would run")
    else:
        assert result.status == "note"
        assert result.detail.startswith(f"PID 1 is {init!r}, not systemd: daemon-reload skipped")


def test_service_account_is_created_for_real_in_a_private_etc(tmp_path):
    require_root()
    for tool in ("unshare", "useradd", "groupadd"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed; cannot create the account for real")
    etc = tmp_path / "etc"
    shutil.copytree("/etc", etc, symlinks=True)
    code = textwrap.dedent("""
        import json
        from hostspec.live_system import ensure_account
        runs = [[[r.status, r.name, r.detail] for r in ensure_account("aie-test-svc", "aie-test-grp", check=check)]
                for check in (True, False, False, True)]
        print(json.dumps(runs))
    """)
    script = 'mount --bind "$1" /etc && exec "$2" -c "$3"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", etc, PYTHON, code],
                          capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot bind-mount a private /etc here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    check, create, again, verify = json.loads(done.stdout.strip().splitlines()[-1])
    assert [c[0] for c in check] == ["drift", "drift"]
    assert check[1][2] == ("missing; would run useradd --system --no-create-home --shell /usr/sbin/nologin "
                           "--gid aie-test-grp aie-test-svc")
    assert [c[0] for c in create] == ["changed", "changed"]
    assert [c[0] for c in again] == ["unchanged", "unchanged"] and [c[0] for c in verify] == ["in-sync", "in-sync"]

    entry = next(line.split(":") for line in (etc / "passwd").read_text().splitlines() if line.startswith("aie-test-svc:"))
    group = next(line.split(":") for line in (etc / "group").read_text().splitlines() if line.startswith("aie-test-grp:"))
    assert entry[6] == "/usr/sbin/nologin" and entry[3] == group[2]
    assert int(entry[2]) < 1000  # a system account (login.defs SYS_UID_MAX)
    assert "aie-test-svc" not in Path("/etc/passwd").read_text()


def test_account_in_a_non_live_root_is_only_noted(tmp_path):
    result = live_system.account_in_root("ai-engine", "ai-engine", tmp_path)
    assert result.status == "note" and "not created (root" in result.detail
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("ai-engine:x:990:990::/nonexistent:/usr/sbin/nologin\n")
    assert live_system.account_in_root("ai-engine", "ai-engine", tmp_path).detail == f"exists in {tmp_path}/etc/passwd"
