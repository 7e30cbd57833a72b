"""The balancer host: HAProxy's rendered config installed and applied, and
its runtime API, all through the host's deploy Target (a local root or SSH;
the host needs haproxy and a bare python3, nothing of ours).

Installing follows what the distro's unit does on `systemctl reload`
(ExecReload: `haproxy -c`, then USR2 to the master):

1. Compare each rendered file with the host's (sha256); nothing differs and
   HAProxy runs: "unchanged", no reload.
2. Stage each changed file beside the live one, check the staged haproxy.cfg
   with `haproxy -c -f`: a refused config is one error line with HAProxy's
   own message, and the live file and the running HAProxy stay as they were.
3. Rename the staged files over the live ones (atomic in one directory).
4. Start HAProxy when it does not run, else reload it gracefully: the new
   worker takes the listening sockets over from the old one (master-worker
   mode passes them on through the stats socket's `expose-fd listeners`), the
   old one finishes the connections it holds, so no connection is refused.
   On a systemd host (ROOT is / and systemd booted it) that is `systemctl
   reload|start haproxy`; elsewhere (a test root, a container) HAProxy is
   supervised here like the engine (engine.deploy.supervise): master-worker
   daemon, its master's pid in ROOT/run/haproxy.pid, reload = USR2.
5. Wait until a worker of the new config answers on the runtime socket
   (`show info` names another Pid), bounded by deploy.health_timeout_s.

A file that only Prometheus reads (file_sd) is installed without a reload.

`check` (provision's --check) runs step 1 only and returns each differing
file's unified diff; it changes nothing on the host.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import shlex
import time
from dataclasses import dataclass
from typing import Callable

from engine.deploy import DeployError
from engine.deploy.haproxy import RuntimeAPI, shell_transport
from engine.deploy.targets import HostResult, Target

CONFIG = "etc/haproxy/haproxy.cfg"
PIDFILE = "run/haproxy.pid"   # the master's pid where HAProxy is supervised here, not by systemd
STAGED = ".aie-new"           # suffix of a staged file beside the live one
# Where the distro installs haproxy; a login shell over SSH has it on PATH,
# a local root's command runs with /usr/bin:/bin only.
PATH = 'export PATH="$PATH:/usr/sbin:/sbin"'

Say = Callable[[str, str], None]


@dataclass(frozen=True)
class Probe:
    haproxy: str | None          # the binary's path; None: not installed
    systemd: bool                # systemd runs HAProxy here (ROOT is / on a systemd-booted host)
    pid: int | None              # HAProxy's master (supervised) or MainPID (systemd); None: not running
    digests: dict[str, str | None]   # sha256 of each live file; None: missing


class BalancerHost:
    def __init__(self, target: Target, runtime_socket: str, wait_s: float):
        self.target, self.socket, self.wait_s = target, runtime_socket, wait_s

    @property
    def name(self) -> str:
        return self.target.name

    def path(self, rel: str) -> str:
        return f"{self.target.root.rstrip('/')}/{rel}"

    def api(self) -> RuntimeAPI:
        """The runtime API on this host, whatever carries the commands there."""
        return RuntimeAPI(self.socket, transport=shell_transport(self.target.shell, self.target.python),
                          where=f"{self.name}:{self.socket}")

    def _sh(self, script: str, what: str) -> str:
        code, out, err = self.target.shell(f"{PATH}\n{script}")
        if code != 0:
            raise DeployError(f"{what} failed (exit {code}): {_last_lines(err or out)}", where=self.name)
        return out

    # -- state -----------------------------------------------------------------
    def probe(self, rels: list[str]) -> Probe:
        q, root = shlex.quote, self.target.root
        cfg = self.path(CONFIG)
        script = "\n".join([
            f"R={q(root)}",
            'echo "haproxy $(command -v haproxy || echo -)"',
            'if [ "$R" = / ] && [ -d /run/systemd/system ]; then echo "systemd 1"; '
            'echo "pid $(systemctl show -p MainPID --value haproxy.service)"; else echo "systemd 0"; '
            # A pidfile alone is not proof (a reused pid): the process must be
            # a haproxy of this root's config (as supervise checks the engine).
            f'p=$(head -n 1 {q(self.path(PIDFILE))} 2>/dev/null); '
            f'if [ -n "$p" ] && tr "\\0" "\\n" < /proc/$p/cmdline 2>/dev/null | grep -qxF -- {q(cfg)}; '
            'then echo "pid $p"; else echo "pid 0"; fi; fi',
            *[f'h=$(sha256sum < {q(self.path(rel))} 2>/dev/null | cut -d" " -f1); echo "file {rel} ${{h:--}}"'
              for rel in rels],
        ])
        found: dict[str, str] = {}
        digests: dict[str, str | None] = {}
        for line in self._sh(script, "probing HAProxy").splitlines():
            key, _, value = line.partition(" ")
            if key == "file":
                rel, _, digest = value.rpartition(" ")
                digests[rel] = None if digest == "-" else digest
            else:
                found[key] = value.strip()
        pid = int(found["pid"]) if found.get("pid", "").isdigit() else 0
        return Probe(haproxy=None if found.get("haproxy") in (None, "-") else found["haproxy"],
                     systemd=found.get("systemd") == "1", pid=pid or None, digests=digests)

    def worker_pid(self) -> str | None:
        """The Pid of the worker answering the runtime socket; None: nothing answers."""
        try:
            return self.api().info().get("Pid")
        except DeployError:
            return None

    def read(self, rel: str) -> bytes | None:
        """A live file's content; None: missing."""
        path = shlex.quote(self.path(rel))
        out = self._sh(f"if [ -f {path} ]; then base64 < {path}; else echo -; fi", f"reading {rel}")
        return None if out.strip() == "-" else base64.b64decode(out)

    # -- install and apply ---------------------------------------------------------
    def check(self, files: dict[str, tuple[bytes, int]]) -> HostResult:
        """What `provision` would do, changing nothing: status `in-sync` or
        `drift`, each difference a step (a file's unified diff, HAProxy not
        running)."""
        t0 = time.monotonic()
        probe, changed = self._plan(files)
        result = HostResult(self.name, "in-sync", pid=probe.pid)
        for rel in sorted(changed):
            live = self.read(rel)
            old = [] if live is None else live.decode("utf-8", "replace").splitlines(keepends=True)
            new = files[rel][0].decode("utf-8", "replace").splitlines(keepends=True)
            result.steps.append("".join(difflib.unified_diff(
                old, new, f"{self.name}:{self.path(rel)}" if live is not None else "/dev/null",
                f"{self.name}:{self.path(rel)} (rendered)")).rstrip("\n"))
        if probe.pid is None:
            result.steps.append("HAProxy is not running: provision starts it")
        elif CONFIG in changed:
            result.steps.append("HAProxy runs: provision checks the new config and reloads it gracefully")
        if changed or probe.pid is None:
            result.status = "drift"
        result.seconds = round(time.monotonic() - t0, 2)
        return result

    def _plan(self, files: dict[str, tuple[bytes, int]]) -> tuple[Probe, dict[str, tuple[bytes, int]]]:
        probe = self.probe(sorted(files))
        if probe.haproxy is None:
            raise DeployError("haproxy is not installed on the balancer host", where=self.name,
                              hint="apt-get install haproxy (`make sysdeps` does it on this machine)")
        return probe, {rel: f for rel, f in files.items()
                       if probe.digests.get(rel) != hashlib.sha256(f[0]).hexdigest()}

    def provision(self, files: dict[str, tuple[bytes, int]], say: Say) -> HostResult:
        """Install the balancer role's rendered files ({relpath: (content,
        mode)}) and start or gracefully reload HAProxy. Raises DeployError
        with the reason; a refused config changes nothing."""
        t0 = time.monotonic()
        probe, changed = self._plan(files)
        result = HostResult(self.name, "unchanged")
        if changed:
            self._stage(changed)
            if CONFIG in changed:
                self._check(self.path(CONFIG) + STAGED, list(changed))
            self._sh("\n".join(f"mv -f {shlex.quote(self.path(rel) + STAGED)} {shlex.quote(self.path(rel))}"
                               for rel in sorted(changed)), "installing the config")
            result.steps.append(f"installed {', '.join(sorted(changed))}")
            say(self.name, f"installed {', '.join(sorted(changed))}")
        if probe.pid is None:
            self._start(probe, say)
            result.status = "started"
        elif CONFIG in changed:
            self._reload(probe, say)
            result.status = "reloaded"
        elif changed:
            result.status = "updated"   # file_sd only: Prometheus reads it itself
        result.pid = probe.pid if probe.pid is not None else self.probe([]).pid
        result.reason = "" if result.status != "unchanged" else "config as rendered, HAProxy running"
        result.seconds = round(time.monotonic() - t0, 2)
        return result

    def _stage(self, files: dict[str, tuple[bytes, int]]) -> None:
        # The content travels inside the command (base64): Fabric feeds a
        # command's stdin one byte per 10 ms.
        lines = ["set -e"]
        for rel, (content, mode) in sorted(files.items()):
            staged = shlex.quote(self.path(rel) + STAGED)
            lines += [f"mkdir -p {shlex.quote(self.path(rel).rsplit('/', 1)[0])}",
                      f"printf %s {base64.b64encode(content).decode()} | base64 -d > {staged}",
                      f"chmod {mode:o} {staged}"]
        self._sh("\n".join(lines), "staging the config")

    def _check(self, staged_cfg: str, staged: list[str]) -> None:
        code, out, err = self.target.shell(f"{PATH}\nhaproxy -c -f {shlex.quote(staged_cfg)} 2>&1")
        if code == 0:
            return
        self.target.shell(" ".join(["rm", "-f", *(shlex.quote(self.path(rel) + STAGED) for rel in staged)]))
        alerts = [ln.strip() for ln in (out + err).splitlines() if "[ALERT]" in ln]
        raise DeployError(f"HAProxy refused the new config, nothing was changed: {_alert(alerts or [out + err])}",
                          where=f"{self.name}:{self.path(CONFIG)}",
                          hint="the spec's balancer section rendered it; `haproxy -c -f` shows the whole check")

    def _start(self, probe: Probe, say: Say) -> None:
        q = shlex.quote
        if probe.systemd:
            self._sh("systemctl start haproxy.service", "systemctl start haproxy")
        else:
            run_dir = self.socket.rsplit("/", 1)[0] or "/"
            self._sh(f"mkdir -p {q(run_dir)} {q(self.path('run'))} && "
                     f"haproxy -W -D -p {q(self.path(PIDFILE))} -f {q(self.path(CONFIG))} 2>&1",
                     "starting haproxy")
        self._wait_worker(None, "start")
        say(self.name, "HAProxy started")

    def _reload(self, probe: Probe, say: Say) -> None:
        old = self.worker_pid()
        if probe.systemd:
            self._sh("systemctl reload haproxy.service", "systemctl reload haproxy")
        else:
            self._sh(f"kill -USR2 {probe.pid}", "signalling haproxy to reload")
        self._wait_worker(old, "reload")
        say(self.name, "HAProxy reloaded gracefully (the old worker finishes its connections)")

    def _wait_worker(self, old: str | None, what: str) -> None:
        """Until a worker other than `old` answers on the runtime socket."""
        deadline = time.monotonic() + self.wait_s
        while (pid := self.worker_pid()) is None or pid == old:
            if time.monotonic() >= deadline:
                raise DeployError(f"HAProxy's {what} did not bring up a worker answering on {self.socket} "
                                  f"within {self.wait_s:g} s (deploy.health_timeout_s)", where=self.name,
                                  hint="see HAProxy's log on the balancer host (journalctl -u haproxy)")
            time.sleep(0.1)  # polling HAProxy's own state, bounded by the deadline


def _last_lines(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:]) or "no output"


def _alert(lines: list[str]) -> str:
    """HAProxy's first complaint, without its '[ALERT]    (pid) : ' prefix."""
    first = lines[0].strip().splitlines()[0] if lines[0].strip() else "no output"
    return first.split(" : ", 1)[1].strip() if " : " in first else first
