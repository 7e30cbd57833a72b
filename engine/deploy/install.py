"""What happens on a host: put a release in place, make it the active one,
(re)start the engine, verify it, and go back to the previous release when
verification fails.

Host side: stdlib only. It runs from inside an extracted bundle under the
host's bare python3 (`python3 -m engine.deploy.remote install ...`); the
release's own venv (created here from the bundled wheels) is what provisions
the config and serves.

Layout under ROOT:
    opt/ai-engine/releases/<version>/   the extracted bundle + venv/ + .installed
    opt/ai-engine/current -> releases/<version>   switched atomically
    opt/ai-engine/history.json          activations, newest last (rollback order)
    opt/ai-engine/deploy.lock           one deploy/rollback/stop per root at a time
Config files go through hostspec's provision_tree (check, backup, atomic
writes), never copied by hand.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from engine.deploy import DeployError, supervise, tokens, verify

BASE = "opt/ai-engine"
INSTALLED = ".installed"   # written last: a release without it is incomplete
MANIFEST = "MANIFEST.json"

# Runs inside the release venv, where hostspec and its dependencies live.
# Prints one JSON line: what provision changed, or why it failed.
_PROVISION = r"""
import json, sys
from pathlib import Path
from hostspec.__main__ import read_tree
from hostspec.errors import SpecError
from hostspec.provision import provision_tree
from hostspec.report import ProvisionError
tree_dir, root, specs = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
try:
    spec = None
    if specs:
        from hostspec.loader import load_spec
        spec = load_spec([Path(s) for s in specs])
    report = provision_tree(read_tree(Path(tree_dir)), root, spec=spec, live=bool(specs))
except (SpecError, ProvisionError, OSError) as exc:
    print(json.dumps({"error": str(exc)})); sys.exit(1)
print(json.dumps({"changed": report.count("changed"), "failed": [i.line() for i in report.items if i.status == "failed"],
                  "summary": report.summary()}))
"""


# Undoes this run's provision on a host that has no release to fall back to:
# hostspec restores the newest backup set, the one that provision just saved.
_UNPROVISION = r"""
import json, sys
from pathlib import Path
from hostspec.provision import rollback
report = rollback(Path(sys.argv[1]), live=sys.argv[2] == "live")
print(json.dumps({"summary": report.summary()}))
"""


@dataclass
class Outcome:
    """What one host operation did; travels to the deployer as one JSON line."""

    status: str                   # deployed | unchanged | restarted | rolled-back (deploy failed, previous
                                  # serves) | failed | switched (rollback on request) | stopped | not-running
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


def _say(message: str) -> None:
    # Progress goes to stderr; stdout carries only the result line.
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class HostRoot:
    """The deploy state under one ROOT: releases, `current`, history."""

    def __init__(self, root: Path, say: Callable[[str], None] = _say):
        self.root = Path(root).resolve()
        self.base = self.root / BASE
        self.releases = self.base / "releases"
        self.current = self.base / "current"
        self.history_file = self.base / "history.json"
        self.say = say
        self.config_changed = 0  # files the last provision_config changed (to undo after a failed first deploy)

    # ---- state -------------------------------------------------------------
    def release(self, version: str) -> Path:
        return self.releases / version

    def installed(self, version: str) -> bool:
        return (self.release(version) / INSTALLED).is_file()

    def active(self) -> str | None:
        try:
            target = os.readlink(self.current)
        except OSError:
            return None
        return Path(target).name

    def history(self) -> list[dict]:
        try:
            return json.loads(self.history_file.read_text())
        except (OSError, ValueError):
            return []

    def _write_json(self, path: Path, data) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)

    def record(self, version: str, event: str) -> None:
        entries = self.history()[-199:]  # bounded: a fleet deploys for years
        entries.append({"version": version, "event": event, "at": int(time.time())})
        self._write_json(self.history_file, entries)

    def previous(self) -> str | None:
        """The release activated before the active one that is still installed."""
        active = self.active()
        for entry in reversed(self.history()):
            v = entry["version"]
            if entry["event"] == "activated" and v != active and self.installed(v):
                return v
        return None

    @contextmanager
    def locked(self):
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / "deploy.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DeployError("another deploy, rollback or stop is running", where=str(self.base / "deploy.lock"),
                                  hint="wait for it to finish") from None
            yield

    # ---- switching ---------------------------------------------------------
    def switch(self, version: str | None) -> None:
        """Point `current` at releases/<version> atomically (a temp symlink
        renamed over it; `ln -sfn` unlinks first and so is not atomic), or
        remove it (None)."""
        if version is None:
            self.current.unlink(missing_ok=True)
            return
        tmp = self.base / f".current.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(f"releases/{version}", tmp)
        os.replace(tmp, self.current)
        fd = os.open(self.base, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def prune(self, keep: int) -> list[str]:
        """Remove complete releases beyond the `keep` most recently activated
        (never the active one). Releases that never served rank last, so a
        failed release goes before a good one."""
        if not self.releases.is_dir():
            return []
        active = self.active()
        order = {e["version"]: i for i, e in enumerate(self.history()) if e["event"] == "activated"}
        complete = sorted((d for d in self.releases.iterdir() if (d / INSTALLED).is_file()),
                          key=lambda d: (order.get(d.name, -1), (d / INSTALLED).stat().st_mtime), reverse=True)
        keepers = {active} | {d.name for d in complete[:keep]}
        removed = []
        for d in complete[keep:]:
            if d.name not in keepers:
                shutil.rmtree(d)
                removed.append(d.name)
        return removed


# ---- preparing a release ----------------------------------------------------

def read_manifest(release_dir: Path) -> dict:
    path = release_dir / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DeployError(f"unreadable bundle manifest: {exc}", where=str(path),
                          hint="the bundle is damaged or not an ai-engine bundle; rebuild it (invoke bundle)") from None


def check_files(release_dir: Path, manifest: dict) -> None:
    """Every file listed in the manifest exists with its sha256 (a truncated
    upload or a damaged disk stops here, before anything changes)."""
    for rel, want in sorted(manifest["files"].items()):
        path = release_dir / rel
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            raise DeployError(f"bundle file missing or unreadable: {exc.strerror}", where=str(path)) from None
        if h.hexdigest() != want:
            raise DeployError("bundle file does not match its sha256 in MANIFEST.json", where=str(path),
                              hint="re-upload the bundle")


def check_python(manifest: dict, python: str) -> None:
    want = manifest.get("python")
    have = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True).stdout.strip()
    if want and have != want:
        raise DeployError(f"the bundle's wheels are for Python {want}, this host's {python} is {have or 'unusable'}",
                          hint="build the bundle with the hosts' Python version")


def _run(cmd: list[str], what: str, timeout_s: float = 900.0, **kw) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kw)
    except subprocess.TimeoutExpired:
        raise DeployError(f"{what}: no result after {timeout_s:g} s", where=" ".join(cmd[:3])) from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DeployError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}", where=cmd[0])
    return proc


def build_venv(release_dir: Path, python: str) -> None:
    """venv without ensurepip (Debian strips it) + pip run from the bundled pip
    wheel, installing only from wheels/ (hosts are often air-gapped)."""
    venv = release_dir / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    _run([python, "-m", "venv", "--without-pip", str(venv)], "creating the release venv")
    wheels = release_dir / "wheels"
    pip = sorted(wheels.glob("pip-*.whl"))
    if not pip:
        raise DeployError("no pip wheel in the bundle", where=str(wheels))
    # --isolated: no pip.conf or PIP_* of the host may add an index or a constraint.
    # --no-compile: bytecode is written lazily by the engine itself (saves ~half the install time).
    # Every bundled wheel, not only what the engine wheel declares: the bundle
    # carries requirements/base.in's closure (uvloop is an optional extra).
    packages = sorted(str(w) for w in wheels.glob("*.whl") if not w.name.startswith("pip-"))
    _run([str(venv / "bin" / "python"), f"{pip[-1]}/pip", "install", "--isolated", "--quiet", "--no-index",
          "--no-compile", "--disable-pip-version-check", "--find-links", str(wheels), *packages],
         "installing the wheels into the release venv")


def _wheels(manifest: dict) -> dict[str, str]:
    return {rel: sha for rel, sha in manifest["files"].items() if rel.startswith("wheels/")}


def find_donor(host: HostRoot, manifest: dict) -> tuple[Path, dict] | None:
    """The newest installed release with the same wheels and Python (by
    sha256): its venv and unchanged files can be shared with a new release."""
    if not host.releases.is_dir():
        return None
    candidates = [d for d in host.releases.iterdir() if d.name != manifest["version"] and (d / INSTALLED).is_file()]
    for d in sorted(candidates, key=lambda d: (d / INSTALLED).stat().st_mtime, reverse=True):
        try:
            other = read_manifest(d)
        except DeployError:
            continue
        if other.get("python") == manifest.get("python") and _wheels(other) == _wheels(manifest):
            return d, other
    return None


def _link_over(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.link.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.link(src, tmp)
    os.replace(tmp, dst)


def share_unchanged(release_dir: Path, manifest: dict, donor: Path, donor_manifest: dict) -> int:
    """Hard-link every file of the new release that is byte-identical (same
    sha256) to the donor's, so a release that changes one config file costs
    that file's bytes on disk, not the whole bundle again. Release files are
    never written after install, so sharing them is safe. Bytes saved."""
    saved = 0
    for rel, sha in manifest["files"].items():
        src, dst = donor / rel, release_dir / rel
        if donor_manifest["files"].get(rel) != sha or not src.is_file() or src.stat().st_ino == dst.stat().st_ino:
            continue
        try:
            _link_over(src, dst)
        except OSError:
            continue  # another filesystem, or links not allowed: keep the copy
        saved += src.stat().st_size
    return saved


def clone_venv(donor: Path, release_dir: Path) -> None:
    """The donor's venv (same wheels) hard-linked into the new release; only
    the files that name the donor's path (bin/ scripts, pyvenv.cfg) are
    rewritten, as new files. Seconds instead of a pip install."""
    src, dst = donor / "venv", release_dir / "venv"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    old, new = str(donor.resolve()).encode(), str(release_dir.resolve()).encode()
    for path in [*(dst / "bin").iterdir(), dst / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data:
            mode = path.stat().st_mode
            path.unlink()  # break the link: the donor's file stays as it was
            path.write_bytes(data.replace(old, new))
            path.chmod(mode)


def prepare(host: HostRoot, release_dir: Path, python: str) -> dict:
    """Make releases/<version> complete (files checked, venv built or shared
    with an installed release of the same wheels); idempotent."""
    manifest = read_manifest(release_dir)
    version = manifest["version"]
    if release_dir.resolve() != host.release(version).resolve():
        raise DeployError(f"release {version} must be installed from {host.release(version)}", where=str(release_dir))
    if host.installed(version):
        return manifest
    host.say(f"checking {len(manifest['files'])} files of release {version}")
    check_files(release_dir, manifest)
    check_python(manifest, python)
    donor = find_donor(host, manifest)
    if donor is not None:
        saved = share_unchanged(release_dir, manifest, *donor)
        host.say(f"sharing {saved / 1e6:.1f} MB of unchanged files and the venv with release {donor[0].name}")
        clone_venv(donor[0], release_dir)
    else:
        host.say("building the release venv from the bundled wheels")
        build_venv(release_dir, python)
    (release_dir / INSTALLED).write_text(f"{int(time.time())}\n")
    return manifest


# ---- activating ---------------------------------------------------------------

def systemd_in_charge(root: Path) -> bool:
    """systemd manages the engine only on the real root of a systemd-booted
    host (sd_booted(3): /run/systemd/system exists)."""
    return Path(root).resolve() == Path("/") and Path("/run/systemd/system").is_dir()


def provision_config(host: HostRoot, version: str) -> int:
    """Install the release's rendered tree into ROOT through hostspec; the
    number of files changed. Live kernel state only when ROOT is /."""
    release = host.release(version)
    specs = sorted(str(p) for p in (release / "spec").glob("*.yaml")) if host.root == Path("/") else []
    # -I: the release's own engine/ (the installer files) must not shadow the
    # wheel's engine package hostspec imports (engine.units, engine.config_schema).
    proc = subprocess.run([str(release / "venv" / "bin" / "python"), "-I", "-c", _PROVISION, str(release / "rootfs"),
                           str(host.root), *specs], capture_output=True, text=True, timeout=300)
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
    python = str(host.release(version) / "venv" / "bin" / "python")
    live = "live" if host.root == Path("/") else "files"
    proc = subprocess.run([python, "-I", "-c", _UNPROVISION, str(host.root), live], capture_output=True, text=True,
                          timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])["summary"]
    except (IndexError, ValueError, KeyError):
        return f"could not restore the previous config: {(proc.stderr or proc.stdout).strip()[-200:]}"


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


def pre_start_check(host: HostRoot, settings: Settings) -> list[str]:
    """Run the rendered ROOT/opt/ai-engine/libexec/check-host before a
    supervised start, as systemd's ExecStartPre does for the unit. Enforced
    (see check_host_enforced): a failure raises DeployError with its
    findings. Otherwise: the findings as warning lines."""
    enforced = check_host_enforced(host.root, settings.check_host)
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
        _run(["systemctl", "daemon-reload"], "systemctl daemon-reload")
        _run(["systemctl", "restart", "ai-engine.service"], "systemctl restart ai-engine.service")
        return engine_pid(host)
    return supervise.start(host.root)


def stop_engine(host: HostRoot, timeout_s: float) -> int | None:
    if systemd_in_charge(host.root):
        pid = engine_pid(host)
        _run(["systemctl", "stop", "ai-engine.service"], "systemctl stop ai-engine.service")
        return pid
    return supervise.stop(host.root, timeout_s)


def base_url(manifest: dict) -> str:
    listen = manifest["engine"]["listen"]
    # A wildcard listen address is reached on loopback from the host itself.
    host = "127.0.0.1" if listen in ("0.0.0.0", "", "*") else ("[::1]" if listen == "::" else listen)
    return f"http://{host}:{manifest['engine']['http_port']}"


def check_serving(host: HostRoot, version: str, pid: int | None, settings: Settings) -> float:
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
        ready_s = verify.wait_ready(url, settings.health_timeout_s, alive,
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


def _check_port_free(host: HostRoot, version: str, error: type[DeployError] = DeployError) -> None:
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


def _check_port_before_stop(host: HostRoot, version: str) -> None:
    """Before a healthy engine is stopped: the new release's port must be free
    unless it is the port our running engine holds (checked again once stopped)."""
    active = host.active()
    ours = base_url(read_manifest(host.release(active))) if active and host.installed(active) else None
    if engine_pid(host) is None or ours != base_url(read_manifest(host.release(version))):
        _check_port_free(host, version, PortBusy)


def _checked_start_ok(host: HostRoot, settings: Settings, out: Outcome) -> None:
    """The pre-start host check where no systemd runs it (ExecStartPre does there)."""
    if systemd_in_charge(host.root):
        return
    warnings = pre_start_check(host, settings)
    out.steps.append(f"check-host: {len(warnings)} warning(s)" if warnings else "check-host: ok")
    out.warnings += [w for w in warnings if w not in out.warnings]


def _activate(host: HostRoot, version: str, settings: Settings, out: Outcome) -> int | None:
    """Stop what runs, install the config of `version`, switch, start, verify."""
    if not systemd_in_charge(host.root):
        _check_port_before_stop(host, version)
    stopped = stop_engine(host, settings.stop_timeout_s)
    if stopped:
        out.steps.append(f"stopped pid {stopped}")
    changed = provision_config(host, version)
    out.steps.append(f"config: {changed} file(s) changed")
    host.switch(version)
    out.steps.append(f"current -> releases/{version}")
    _check_port_free(host, version)
    _checked_start_ok(host, settings, out)
    pid = start_engine(host)
    out.steps.append(f"started pid {pid}")
    ready_s = check_serving(host, version, pid, settings)
    out.steps.append(f"ready in {ready_s:.1f} s, smoke inference matches")
    host.record(version, "activated")
    return pid


def install(root: Path, release_dir: Path, settings: Settings, python: str = sys.executable) -> Outcome:
    """Deploy the release extracted at `release_dir` (= ROOT/opt/ai-engine/releases/<version>)."""
    t0 = time.monotonic()
    host = HostRoot(root)
    out = Outcome(status="failed")
    with host.locked():
        manifest = prepare(host, Path(release_dir), python)
        version = out.version = manifest["version"]
        previous = out.previous = host.active()
        try:
            if previous == version:
                _refresh(host, version, settings, out)
            else:
                out.pid = _activate(host, version, settings, out)
                out.status = "deployed"
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
        check_serving(host, version, pid, settings)
        out.status, out.pid = "unchanged", pid
        out.steps.append(f"release {version} already active and serving (pid {pid})")
        return
    out.steps.append(f"config: {changed} file(s) changed" if changed else "engine was not running")
    stop_engine(host, settings.stop_timeout_s)
    _checked_start_ok(host, settings, out)
    out.pid = start_engine(host)
    check_serving(host, version, out.pid, settings)
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
