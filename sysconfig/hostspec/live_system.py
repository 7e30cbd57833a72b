"""Live system state outside /proc and /sys: the boot loader config, systemd,
and the service account. Each step runs a real tool (update-grub,
systemctl, useradd) and turns its outcome into an ItemResult; a tool that is
missing, or a host where the step does not apply, becomes a note that says
what the operator has to do instead.
"""

from __future__ import annotations

import grp
import pwd
import shlex
import shutil
import subprocess
from pathlib import Path

from .report import ItemResult

NOLOGIN = "/usr/sbin/nologin"
TOOL_TIMEOUT_S = 300  # grub-mkconfig probes every disk; minutes on big hosts


def run_tool(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{shlex.join(argv)}: {exc}"
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        return False, f"{shlex.join(argv)} exited {done.returncode}: {last[-1] if last else 'no output'}"
    return True, shlex.join(argv)


def grub_command(cmdline: list[str], path: str | None = None, boot: Path = Path("/boot")) -> list[str] | None:
    """The command that regenerates the boot config on this distribution:
    Debian's update-grub, Fedora/SUSE's grub2-mkconfig (or grub-mkconfig),
    RHEL's grubby (BLS entries ignore /etc/default/grub.d, so the arguments
    are passed directly). None when no GRUB tool exists."""
    if shutil.which("update-grub", path=path):
        return ["update-grub"]
    for tool, cfg in (("grub2-mkconfig", "grub2/grub.cfg"), ("grub-mkconfig", "grub/grub.cfg")):
        if shutil.which(tool, path=path):
            return [tool, "-o", str(boot / cfg)]
    if shutil.which("grubby", path=path):
        return ["grubby", "--update-kernel=ALL", f"--args={' '.join(cmdline)}"]
    return None


def regenerate_grub(dropin: str, cmdline: list[str], *, check: bool, path: str | None = None) -> ItemResult:
    command = grub_command(cmdline, path)
    if command is None:
        return ItemResult("grub", dropin, "note",
                          "no GRUB tool found (update-grub, grub2-mkconfig, grub-mkconfig, grubby): the drop-in is "
                          "installed but the boot config was not regenerated; regenerate it with your boot loader's tool")
    if check:
        return ItemResult("grub", dropin, "drift", f"boot config would be regenerated: {shlex.join(command)}")
    ok, detail = run_tool(command)
    return ItemResult("grub", dropin, "changed" if ok else "failed", detail)


def pid1_name(proc: Path) -> str:
    try:
        return (proc / "1" / "comm").read_text().strip()
    except OSError:
        return "unknown"


def daemon_reload(unit: str, proc: Path, *, check: bool) -> ItemResult:
    init = pid1_name(proc)
    if init != "systemd":
        return ItemResult("systemd", unit, "note",
                          f"PID 1 is {init!r}, not systemd: daemon-reload skipped; the unit is read when systemd next starts")
    if check:
        return ItemResult("systemd", unit, "drift", "unit changed: systemctl daemon-reload would run")
    ok, detail = run_tool(["systemctl", "daemon-reload"])
    return ItemResult("systemd", unit, "changed" if ok else "failed", detail)


def _exists(lookup, name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


def ensure_account(user: str, group: str, *, check: bool) -> list[ItemResult]:
    """Create the service group and user on this host when missing: a system
    account without home or login shell."""
    results = []
    plan = [
        (f"group {group}", grp.getgrnam, group, ["groupadd", "--system", group]),
        (f"user {user}", pwd.getpwnam, user,
         ["useradd", "--system", "--no-create-home", "--shell", NOLOGIN, "--gid", group, user]),
    ]
    for label, lookup, name, argv in plan:
        if _exists(lookup, name):
            results.append(ItemResult("user", label, "in-sync" if check else "unchanged", "exists"))
        elif check:
            results.append(ItemResult("user", label, "drift", f"missing; would run {shlex.join(argv)}"))
        else:
            ok, detail = run_tool(argv)
            results.append(ItemResult("user", label, "changed" if ok else "failed", detail))
    return results


def account_in_root(user: str, group: str, root: Path) -> ItemResult:
    """A non-live root is somebody else's filesystem: never edit the
    passwd of the machine running provision for it; say what is needed."""
    passwd = root / "etc" / "passwd"
    try:
        present = any(line.split(":", 1)[0] == user for line in passwd.read_text().splitlines())
    except OSError:
        present = False
    if present:
        return ItemResult("user", f"user {user}", "note", f"exists in {passwd}")
    return ItemResult("user", f"user {user}", "note",
                      f"not created (root {root} is not the live system); on the target host provision creates it: "
                      f"groupadd --system {group}; useradd --system --no-create-home --shell {NOLOGIN} --gid {group} {user}")
