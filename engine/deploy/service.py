"""The engine process on a host: started and stopped through systemd or the
supervisor, checked by check-host before a start, and verified serving
(health, one smoke inference per model) after it (host side: stdlib only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from engine.deploy import DeployError, supervise, tokens, verify
from engine.deploy.hostroot import HostRoot, read_manifest, run_command


def systemd_in_charge(root: Path) -> bool:
    """systemd manages the engine only on the real root of a systemd-booted
    host (sd_booted(3): /run/systemd/system exists)."""
    return Path(root).resolve() == Path("/") and Path("/run/systemd/system").is_dir()


def engine_pid(host: HostRoot) -> int | None:
    if systemd_in_charge(host.root):
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", "ai-engine.service"],
                             capture_output=True, text=True).stdout.strip()
        return int(out) if out.isdigit() and int(out) > 0 else None
    return supervise.running_pid(host.root)


CHECK_HOST = "opt/ai-engine/libexec/check-host"
CHECK_HOST_MODES = ("auto", "enforce", "warn")


def check_host_enforced(root: Path, mode: str) -> bool:
    """Whether a failing check-host stops the start. auto: only when ROOT is
    "/", i.e. when the spec's host section describes the machine the engine
    runs on. Under any other root (build/root on a laptop, a CI box) the
    hugepages, THP and memlock it checks are the deployer's machine's, which
    the spec never claimed to tune: its findings are reported as warnings."""
    if mode not in CHECK_HOST_MODES:
        raise DeployError(f"unknown check-host mode {mode!r}", where="--check-host",
                          hint=f"one of {', '.join(CHECK_HOST_MODES)}")
    return Path(root).resolve() == Path("/") if mode == "auto" else mode == "enforce"


def _findings(output: str) -> list[str]:
    """check-host's `FAIL: what` + `  fix: command` pairs, one line each."""
    found: list[str] = []
    for line in output.splitlines():
        if line.startswith("FAIL: "):
            found.append(line[len("FAIL: "):])
        elif line.startswith("  fix: ") and found:
            found[-1] += f" (fix: {line[len('  fix: '):]})"
    return found


def pre_start_check(host: HostRoot, mode: str) -> list[str]:
    """Run the rendered ROOT/opt/ai-engine/libexec/check-host before a
    supervised start, as systemd's ExecStartPre does for the unit. Enforced
    (see check_host_enforced): a failure raises DeployError with its
    findings. Otherwise: the findings as warning lines."""
    enforced = check_host_enforced(host.root, mode)
    script = host.root / CHECK_HOST
    if not script.is_file():
        raise DeployError("check-host is missing (provisioning installs it)", where=str(script),
                          hint="redeploy; the release's rootfs/ should hold it")
    # AIE_SYS: the script's documented way to read another /sys tree (tests).
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           **{k: os.environ[k] for k in ("AIE_SYS",) if k in os.environ}}
    try:
        proc = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DeployError(f"check-host could not run: {exc}", where=str(script)) from None
    if proc.returncode == 0:
        return []
    found = _findings(proc.stdout) or [f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"]
    if enforced:
        raise DeployError("check-host refused the start: " + "; ".join(found), where=str(script),
                          hint="fix the host as each finding says, then deploy again")
    return [f"check-host (warning only, ROOT is not /): {f}" for f in found]


def start_engine(host: HostRoot) -> int | None:
    if systemd_in_charge(host.root):
        run_command(["systemctl", "daemon-reload"], "systemctl daemon-reload")
        run_command(["systemctl", "restart", "ai-engine.service"], "systemctl restart ai-engine.service")
        return engine_pid(host)
    return supervise.start(host.root)


def stop_engine(host: HostRoot, timeout_s: float) -> int | None:
    if systemd_in_charge(host.root):
        pid = engine_pid(host)
        run_command(["systemctl", "stop", "ai-engine.service"], "systemctl stop ai-engine.service")
        return pid
    return supervise.stop(host.root, timeout_s)


def base_url(manifest: dict) -> str:
    listen = manifest["engine"]["listen"]
    # A wildcard listen address is reached on loopback from the host itself.
    host = "127.0.0.1" if listen in ("0.0.0.0", "", "*") else ("[::1]" if listen == "::" else listen)
    return f"http://{host}:{manifest['engine']['http_port']}"


def check_serving(host: HostRoot, version: str, pid: int | None, health_timeout_s: float) -> float:
    """Health wait + one smoke inference per model of `version`; seconds to ready.
    Raises DeployError with the reason (and the log's last lines)."""
    release = host.release(version)
    manifest = read_manifest(release)
    url = base_url(manifest)

    def alive() -> bool:
        return pid is None or not supervise.exited(pid)

    auth = manifest["engine"].get("auth")
    token = tokens.for_root(auth, host.root)
    try:
        ready_s = verify.wait_ready(url, health_timeout_s, alive,
                                    token=None if (auth or {}).get("open_health", True) else token)
        for model in manifest["engine"]["models"]:
            reference = json.loads((release / model["smoke"]).read_text())
            verify.smoke(url, reference, token=token)
        if not alive():
            # Something answered, but not our process: it died (e.g. the port
            # was taken after the pre-start check) and another server replied.
            raise DeployError("the engine exited; the answers came from another process on its port", where=url)
    except DeployError as exc:
        if not systemd_in_charge(host.root):
            tail = failure_lines(supervise.log_tail(host.root, 200, console=True))
            if tail:
                exc.message += " — engine said: " + " | ".join(tail)
        raise
    return ready_s


class PortBusy(DeployError):
    """The release's port is taken by another process; raised before anything changed."""


def failure_lines(console: list[str], keep: int = 3, width: int = 400) -> list[str]:
    """What explains a failed start, from this run's console output: the
    error lines (else the last lines), each once, whole words only."""
    lines = [ln.strip() for ln in console if ln.strip()]
    errors = [ln for ln in lines if '"level":"error"' in ln or "Error" in ln or ln.startswith("error")]
    picked: list[str] = []
    for line in (errors or lines)[-keep * 4:]:
        if line not in picked:
            picked.append(line)
    return [_shorten(line, width) for line in picked[-keep:]]


def _shorten(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    cut = line.rfind(" ", 0, width)
    return line[:cut if cut > width // 2 else width].rstrip() + " …"


def check_port_free(host: HostRoot, version: str, error: type[DeployError] = DeployError) -> None:
    """With our engine stopped nothing may answer on its port; otherwise the
    health check would talk to a stranger (and our engine could not bind)."""
    manifest = read_manifest(host.release(version))
    address, port = base_url(manifest).split("//", 1)[1].rsplit(":", 1)
    try:
        with socket.create_connection((address.strip("[]"), int(port)), timeout=1.0):
            pass
    except OSError:
        return
    raise error(f"port {port} is already in use by another process (not this root's engine)",
                where=f"{address}:{port}", hint="stop that process or change engine.http_port in the spec")


def check_port_before_stop(host: HostRoot, version: str) -> None:
    """Before a healthy engine is stopped: the new release's port must be free
    unless it is the port our running engine holds (checked again once stopped)."""
    active = host.active()
    ours = base_url(read_manifest(host.release(active))) if active and host.installed(active) else None
    if engine_pid(host) is None or ours != base_url(read_manifest(host.release(version))):
        check_port_free(host, version, PortBusy)
