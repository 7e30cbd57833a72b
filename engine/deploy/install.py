"""What happens on a host: put a release in place, make it the active one,
(re)start the engine, verify it, and go back to the previous release when
verification fails.

Host side: stdlib only. It runs from inside an extracted bundle under the
host's bare python3 (`python3 -m engine.deploy.remote install ...`); the
release's own venv (created here from the bundled wheels) is what provisions
the config and serves.

Layout under ROOT: engine.deploy.hostroot.
Config files go through hostspec's provision_tree (check, backup, atomic
writes), never copied by hand: engine.deploy.host_config runs it in the
release venv.

The parts: hostroot (the state under ROOT), prepare (release files and
venv), service (start, stop, check-host, verify serving), and here the
operations remote runs: install, rollback, stop, status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.deploy import DeployError, supervise, tokens, verify
from engine.deploy.hostroot import INSTALLED, HostRoot, read_manifest, run_command
from engine.deploy.prepare import prepare
from engine.deploy.service import (PortBusy, base_url, check_port_before_stop, check_port_free, check_serving,
                                   engine_pid, pre_start_check, start_engine, stop_engine, systemd_in_charge)


@dataclass
class Outcome:
    """What one host operation did; travels to the deployer as one JSON line."""

    status: str                   # deployed | reloaded (config only, SIGHUP) | unchanged | restarted |
                                  # rolled-back (deploy failed, previous serves) | failed | switched
                                  # (rollback on request) | stopped | not-running
    version: str | None = None    # the release this run was about
    active: str | None = None     # the release serving when the run ended (None: none)
    previous: str | None = None   # the release that was active before
    pid: int | None = None
    reason: str = ""
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # served, but something the operator should know

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def ok(self) -> bool:
        return self.status not in ("failed", "rolled-back")


@dataclass(frozen=True)
class Settings:
    health_timeout_s: float = 60.0
    stop_timeout_s: float = 30.0
    keep_releases: int = 3
    check_host: str = "auto"  # auto | enforce | warn: see pre_start_check


def _host_config(release: Path) -> list[str]:
    """engine.deploy.host_config under the release's venv python, where
    hostspec lives. -P: the working directory (an extracted bundle holds this
    installer's own engine/) must not shadow the venv's engine package."""
    return [str(release / "venv" / "bin" / "python"), "-P", "-m", "engine.deploy.host_config"]


def provision_config(host: HostRoot, version: str) -> int:
    """Install the release's rendered tree into ROOT through hostspec; the
    number of files changed. Live kernel state only when ROOT is /."""
    release = host.release(version)
    specs = sorted(str(p) for p in (release / "spec").glob("*.yaml")) if host.root == Path("/") else []
    proc = subprocess.run([*_host_config(release), "provision", str(release / "rootfs"), str(host.root), *specs],
                          capture_output=True, text=True, timeout=300)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise DeployError(f"provisioning the config failed: {(proc.stderr or proc.stdout).strip()[-300:]}",
                          where=str(host.root)) from None
    if "error" in result or result["failed"]:
        raise DeployError(f"provisioning the config failed: {result.get('error') or '; '.join(result['failed'])}",
                          where=str(host.root))
    host.say(f"config: {result['summary']}")
    host.config_changed = result["changed"]
    return result["changed"]


def unprovision_config(host: HostRoot, version: str) -> str:
    """Put back the config files this run's provision replaced (first deploy failed)."""
    live = "live" if host.root == Path("/") else "files"
    proc = subprocess.run([*_host_config(host.release(version)), "rollback", str(host.root), live],
                          capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])["summary"]
    except (IndexError, ValueError, KeyError):
        return f"could not restore the previous config: {(proc.stderr or proc.stdout).strip()[-200:]}"


def _checked_start_ok(host: HostRoot, settings: Settings, out: Outcome) -> None:
    """The pre-start host check where no systemd runs it (ExecStartPre does there)."""
    if systemd_in_charge(host.root):
        return
    warnings = pre_start_check(host, settings.check_host)
    out.steps.append(f"check-host: {len(warnings)} warning(s)" if warnings else "check-host: ok")
    out.warnings += [w for w in warnings if w not in out.warnings]


def _activate(host: HostRoot, version: str, settings: Settings, out: Outcome) -> int | None:
    """Stop what runs, install the config of `version`, switch, start, verify."""
    if not systemd_in_charge(host.root):
        check_port_before_stop(host, version)
    stopped = stop_engine(host, settings.stop_timeout_s)
    if stopped:
        out.steps.append(f"stopped pid {stopped}")
    changed = provision_config(host, version)
    out.steps.append(f"config: {changed} file(s) changed")
    host.switch(version)
    out.steps.append(f"current -> releases/{version}")
    check_port_free(host, version)
    _checked_start_ok(host, settings, out)
    pid = start_engine(host)
    out.steps.append(f"started pid {pid}")
    ready_s = check_serving(host, version, pid, settings.health_timeout_s)
    out.steps.append(f"ready in {ready_s:.1f} s, smoke inference matches")
    host.record(version, "activated")
    return pid


def _restart_or_reload(host: HostRoot, previous: str | None, version: str) -> tuple[bool, str]:
    """engine.deploy.reload's decision, run in the new release's venv: (True,
    why) when only engine.yaml settings the running engine reloads changed."""
    if previous is None or not host.installed(previous) or engine_pid(host) is None:
        return False, ""
    python = host.release(version) / "venv" / "bin" / "python"
    try:
        proc = subprocess.run([str(python), "-P", "-m", "engine.deploy.reload", str(host.release(previous)),
                               str(host.release(version))], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"could not compare the releases: {exc}"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        return bool(answer["reload"]), str(answer["why"])
    except (IndexError, ValueError, KeyError):
        return False, f"could not compare the releases: {(proc.stderr or proc.stdout).strip()[-200:]}"


def _reload(host: HostRoot, version: str, settings: Settings, out: Outcome, why: str) -> int | None:
    """Install the config of `version`, switch, SIGHUP the running engine
    (systemctl reload where systemd is in charge: ExecReload sends it),
    wait for its log to say the reload ended, verify. Same pid."""
    pid = engine_pid(host)
    log = supervise.Paths(host.root).logfile
    offset = log.stat().st_size if log.is_file() else 0
    changed = provision_config(host, version)
    out.steps.append(f"config: {changed} file(s) changed")
    host.switch(version)
    out.steps.append(f"current -> releases/{version}")
    if systemd_in_charge(host.root):
        run_command(["systemctl", "reload", "ai-engine.service"], "systemctl reload ai-engine.service")
    else:
        os.kill(pid, signal.SIGHUP)
    event = _wait_reloaded(log, offset, settings.health_timeout_s)
    if event.get("event") == "reload_failed" or event.get("failed"):
        raise DeployError(f"the engine's reload failed: {event.get('error') or 'models ' + ', '.join(event['failed'])}",
                          where=str(log))
    check_serving(host, version, pid, settings.health_timeout_s)
    if engine_pid(host) != pid:
        raise DeployError(f"the engine's pid changed during the reload ({pid} -> {engine_pid(host)})", where=str(log))
    host.record(version, "activated")
    out.steps.append(f"reloaded with SIGHUP, pid {pid} kept: {why}")
    return pid


def _wait_reloaded(log: Path, offset: int, timeout_s: float) -> dict:
    """The engine's first reloaded / reload_failed log record after `offset`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(log, "rb") as fh:
                fh.seek(offset if fh.seek(0, 2) >= offset else 0)  # rotated meanwhile: the new file from its start
                for line in fh.read().splitlines():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if record.get("event") in ("reloaded", "reload_failed"):
                        return record
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise DeployError(f"the engine did not report its reload within {timeout_s:g} s", where=str(log))
        time.sleep(0.1)  # polling the engine's own log, bounded by the deadline


def install(root: Path, release_dir: Path, settings: Settings, python: str = sys.executable,
            venv_cache: Path | None = None) -> Outcome:
    """Deploy the release extracted at `release_dir` (= ROOT/opt/ai-engine/releases/<version>)."""
    t0 = time.monotonic()
    host = HostRoot(root)
    out = Outcome(status="failed")
    with host.locked():
        manifest = prepare(host, Path(release_dir), python, venv_cache)
        version = out.version = manifest["version"]
        previous = out.previous = host.active()
        try:
            if previous == version:
                _refresh(host, version, settings, out)
            elif (how := _restart_or_reload(host, previous, version))[0]:
                out.pid = _reload(host, version, settings, out, how[1])
                out.status, out.reason = "reloaded", f"config only, reloaded (SIGHUP, pid kept): {how[1]}"
            else:
                out.pid = _activate(host, version, settings, out)
                out.status = "deployed"
                if how[1]:
                    out.reason = f"restarted: {how[1]}"
        except PortBusy as exc:
            out.reason = f"{exc}; nothing was changed" + (f", release {previous} still serves" if previous else "")
            host.record(version, "failed")
        except DeployError as exc:
            out.reason = str(exc)
            host.record(version, "failed")
            if previous != version:
                _recover(host, previous, settings, out)
            else:
                out.status = "failed"
        out.active = host.active()
        out.steps += [f"pruned release {v}" for v in host.prune(settings.keep_releases)]
    out.seconds = round(time.monotonic() - t0, 2)
    return out


def _refresh(host: HostRoot, version: str, settings: Settings, out: Outcome) -> None:
    """The release is already active: only drifted config or a dead engine
    cause work; otherwise nothing is touched (the pid stays the same)."""
    changed = provision_config(host, version)
    pid = engine_pid(host)
    if changed == 0 and pid is not None:
        check_serving(host, version, pid, settings.health_timeout_s)
        out.status, out.pid = "unchanged", pid
        out.steps.append(f"release {version} already active and serving (pid {pid})")
        return
    out.steps.append(f"config: {changed} file(s) changed" if changed else "engine was not running")
    stop_engine(host, settings.stop_timeout_s)
    _checked_start_ok(host, settings, out)
    out.pid = start_engine(host)
    check_serving(host, version, out.pid, settings.health_timeout_s)
    out.status = "restarted"
    out.steps.append(f"restarted as pid {out.pid}")


def _recover(host: HostRoot, previous: str | None, settings: Settings, out: Outcome) -> None:
    """After a failed activation: back to `previous`, or (first deploy) stop
    and leave the new release installed but inactive."""
    stop_engine(host, settings.stop_timeout_s)
    if previous is None or not host.installed(previous):
        host.switch(None)
        out.status = "failed"
        out.reason += "; no previous release: engine stopped, the new release left inactive (no current)"
        if host.config_changed and out.version and host.installed(out.version):
            out.steps.append(f"config restored: {unprovision_config(host, out.version)}")
        return
    host.say(f"verification failed, rolling back to {previous}")
    try:
        out.pid = _activate(host, previous, settings, out)
        out.status = "rolled-back"
        out.reason += f"; rolled back to {previous}, which serves again"
    except DeployError as exc:
        stop_engine(host, settings.stop_timeout_s)
        out.status = "failed"
        out.reason += f"; rollback to {previous} failed too: {exc}"


def rollback(root: Path, settings: Settings, to: str | None = None) -> Outcome:
    """Activate the previous release (or `to`) on demand."""
    t0 = time.monotonic()
    host = HostRoot(root)
    out = Outcome(status="failed", previous=host.active())
    with host.locked():
        target = to or host.previous()
        out.version = target
        if target is None or not host.installed(target):
            out.reason = ("no previous release to roll back to" if to is None
                          else f"release {to} is not installed here")
        elif target == out.previous:
            out.reason = f"release {target} is already active"
        else:
            try:
                out.pid = _activate(host, target, settings, out)
                # Not "rolled-back": that names a deploy that failed; this is a
                # requested switch that succeeded.
                out.status = "switched"
            except PortBusy as exc:
                out.reason = f"switch to {target} failed: {exc}; nothing was changed"
            except DeployError as exc:
                out.reason = str(exc)
                _recover(host, out.previous, settings, out)
                out.reason = f"switch to {target} failed: {out.reason}"
                out.status = "failed"
        out.active = host.active()
    out.seconds = round(time.monotonic() - t0, 2)
    return out


def stop(root: Path, settings: Settings) -> Outcome:
    host = HostRoot(root)
    with host.locked():
        pid = stop_engine(host, settings.stop_timeout_s)
    return Outcome(status="stopped" if pid else "not-running", active=host.active(), pid=pid)


def status(root: Path) -> dict:
    """Per host: active release, pid, health, uptime (read-only, no lock)."""
    host = HostRoot(root)
    active = host.active()
    pid = engine_pid(host)
    health = "stopped"
    if pid is not None and active and host.installed(active):
        manifest = read_manifest(host.release(active))
        auth = manifest["engine"].get("auth") or {}
        try:
            token = None if auth.get("open_health", True) else tokens.for_root(auth, host.root)
        except DeployError:
            token = None  # the answer (401) says what is wrong
        try:
            code, _ = verify.http_json("GET", base_url(manifest) + "/v2/health/ready", timeout_s=3.0, token=token)
            health = "ready" if code == 200 else f"HTTP {code}"
        except OSError as exc:
            health = f"no answer ({getattr(exc, 'reason', exc)})"
    releases = sorted(d.name for d in host.releases.glob("*") if (d / INSTALLED).is_file()) \
        if host.releases.is_dir() else []
    return {"active": active, "pid": pid, "health": health,
            "uptime_s": round(supervise.uptime_s(pid), 1) if pid and not systemd_in_charge(host.root) else None,
            "releases": releases, "previous": host.previous()}
