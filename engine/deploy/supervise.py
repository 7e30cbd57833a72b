"""Run the engine as a supervised background process where systemd is not in
charge (containers, CI, a local root): detached with setsid, its pid in
ROOT/run/ai-engine.pid.

Logs: the engine writes (and rotates) ROOT/var/log/ai-engine/engine.log
itself, as the only writer of that file. Its stdout/stderr go to
engine.console.log beside it, emptied at every start, so it holds this run's
console output only: what a start that fails before the engine's log is open
(or a crash) printed, the reason a failed deploy reports.

Host side: stdlib only (runs under the host's bare python3).

A pidfile alone is not proof: the pid may have been reused after a crash or
a reboot. A pid counts as ours only while /proc/<pid>/cmdline is an
`ai-engine serve` of this root's config.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from engine.deploy import DeployError

PIDFILE = "run/ai-engine.pid"
LOGFILE = "var/log/ai-engine/engine.log"            # the engine's own (rotating) log
CONSOLE = "var/log/ai-engine/engine.console.log"    # the supervised engine's stdout/stderr, this run only
CONFIG = "etc/ai-engine/engine.yaml"
CURRENT = "opt/ai-engine/current"

# The engine sees a small, fixed environment: whatever the deployer's shell
# had (PYTHONPATH, AIE_KERNELS_LIB of a checkout, a venv) must not change
# which code or kernels a release runs.
ENGINE_ENV_KEEP = ("LANG", "LC_ALL", "TZ", "AIE_ISA", "AIE_DEBUG")


@dataclass(frozen=True)
class Paths:
    root: Path

    def at(self, rel: str) -> Path:
        return self.root / rel

    @property
    def pidfile(self) -> Path:
        return self.at(PIDFILE)

    @property
    def logfile(self) -> Path:
        return self.at(LOGFILE)

    @property
    def console(self) -> Path:
        return self.at(CONSOLE)

    @property
    def config(self) -> Path:
        return self.at(CONFIG)

    def command(self) -> list[str]:
        # Through `current`, so the command line names the active release the
        # same way the systemd unit's ExecStart does.
        return [str(self.at(CURRENT) / "venv" / "bin" / "ai-engine"), "serve",
                "--config", str(self.config), "--root", str(self.root)]


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_ours(pid: int, paths: Paths) -> bool:
    args = _cmdline(pid)
    return "serve" in args and str(paths.config) in args


def running_pid(root: Path) -> int | None:
    """The pid of this root's engine, or None (no pidfile, stale or reused pid)."""
    paths = Paths(Path(root))
    try:
        pid = int(paths.pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_ours(pid, paths) else None


def uptime_s(pid: int) -> float | None:
    """Seconds since the process started (from /proc, not the pidfile)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime in ticks
    return max(0.0, time.time() - started)


def _write_pidfile(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


def start(root: Path) -> int:
    """Start the active release's engine detached; return its pid. The caller
    checks health: a process that starts and then exits is seen there."""
    paths = Paths(Path(root))
    if running_pid(paths.root) is not None:
        raise DeployError("the engine is already running", where=str(paths.pidfile),
                          hint="stop it first (invoke stop)")
    command = paths.command()
    if not Path(command[0]).exists():
        raise DeployError("no engine executable in the active release", where=command[0],
                          hint="the release's venv is missing; redeploy")
    paths.logfile.parent.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(paths.root)}
    env.update({k: os.environ[k] for k in ENGINE_ENV_KEEP if k in os.environ})
    # Not engine.log: a second writer there doubles every line and keeps
    # writing into the file the engine's rotation has renamed away.
    with open(paths.console, "wb") as log, open(os.devnull, "rb") as null:
        # setsid: the engine must outlive the SSH session or shell that started
        # it and must not get that terminal's SIGHUP (SIGHUP means reload).
        proc = subprocess.Popen(command, stdin=null, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=str(paths.root), start_new_session=True, close_fds=True)
    _write_pidfile(paths.pidfile, proc.pid)
    return proc.pid


def exited(pid: int) -> bool:
    """True once `pid` is gone (reaped, a zombie, or never existed)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
    except ChildProcessError:
        pass  # not our child (the usual case: started by an earlier run)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait up to timeout_s for `pid` to end; True when it did. Waits on a
    pidfd (Linux >= 5.3) rather than polling; falls back to polling /proc."""
    if exited(pid):
        return True
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    deadline = time.monotonic() + timeout_s
    try:
        while not exited(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.05))
    finally:
        if fd is not None:
            os.close(fd)
    return True


def stop(root: Path, timeout_s: float = 30.0) -> int | None:
    """SIGTERM (the engine drains in-flight requests), SIGKILL after timeout_s.
    Returns the pid that was stopped, or None when nothing ran."""
    paths = Paths(Path(root))
    pid = running_pid(paths.root)
    if pid is None:
        paths.pidfile.unlink(missing_ok=True)
        return None
    os.kill(pid, signal.SIGTERM)
    if not wait_exit(pid, timeout_s):
        os.kill(pid, signal.SIGKILL)
        wait_exit(pid, 10.0)
    paths.pidfile.unlink(missing_ok=True)
    return pid


def log_tail(root: Path, lines: int = 20, console: bool = False) -> list[str]:
    """The last `lines` lines of the engine log (`invoke logs`), or of this
    run's console output (console=True: failure reasons); none for lines <= 0."""
    if lines <= 0:
        return []
    path = Paths(Path(root)).console if console else Paths(Path(root)).logfile
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024 * max(1, lines // 100 + 1)))
            data = fh.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-lines:]
