"""Where a bundle goes: a local root directory or an SSH host, and the fleet
runner that deploys many at once.

Both kinds run the same host-side command (`python3 -m engine.deploy.remote`
from inside the extracted release) and parse the same `AIE-RESULT` line; a
local root only skips the upload. SSH goes through one Fabric Connection per
host; the fleet runner is our own thread pool because Fabric's
ThreadingGroup has neither a concurrency cap nor per-host timeouts, and it
stops launching hosts once too many failed (canary first when configured).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fabric import Connection
from invoke.exceptions import CommandTimedOut
from paramiko import BadHostKeyException

from engine.deploy import DeployError, tokens, verify, wheelcache
from engine.deploy.bundle import Bundle, extract
from engine.deploy.hostkeys import HostKeyPolicy
from engine.deploy.hostroot import BASE, INSTALLED
from engine.deploy.remote import RESULT_PREFIX
from engine.deploy.supervise import LOGFILE

Say = Callable[[str, str], None]  # (host name, message)
FAILED = ("failed", "rolled-back", "unreachable")


@dataclass
class Settings:
    """The spec's deploy section (seconds, counts)."""

    keep_releases: int = 3
    keep_bundles: int = 3
    parallel: int = 4
    canary: str | None = None     # the canary host's name (deploy.canary, or its `host`)
    max_fail_fraction: float = 0.0
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 600.0
    transfer_timeout_s: float = 300.0
    health_timeout_s: float = 60.0
    stop_timeout_s: float = 30.0

    @classmethod
    def from_spec(cls, deploy: dict) -> "Settings":
        known = {k: v for k, v in deploy.items() if k in cls.__dataclass_fields__}
        if isinstance(known.get("canary"), dict):  # the ramp's form; its policy is engine.deploy.canary's
            known["canary"] = known["canary"]["host"]
        return cls(**known)


@dataclass
class HostResult:
    name: str
    status: str                   # deployed | unchanged | restarted | rolled-back | failed | unreachable | skipped | ...
    version: str | None = None
    active: str | None = None
    pid: int | None = None
    reason: str = ""
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # the host's full answer (status, logs)

    @property
    def ok(self) -> bool:
        return self.status not in FAILED and self.status != "skipped"


def _parse_result(name: str, stdout: str, stderr: str, code: int) -> HostResult:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if not lines:
        tail = " | ".join((stderr or stdout).strip().splitlines()[-3:])
        return HostResult(name, "failed", reason=f"host-side command gave no result (exit {code}): {tail}")
    data = json.loads(lines[-1][len(RESULT_PREFIX):])
    fields = ("status", "version", "active", "pid", "reason", "seconds", "steps", "warnings")
    known = {k: data[k] for k in fields if k in data}
    known.setdefault("status", "ok" if code == 0 else "failed")
    return HostResult(name, data=data, **known)


class HostUnreachable(DeployError):
    """The SSH connection could not be made (refused, timed out, auth failed)."""


class Target:
    """One deploy target. Subclasses provide _run (a host-side command) and _ensure_release."""

    kind = "?"

    def __init__(self, name: str, root: str, settings: Settings, python: str = "python3"):
        self.name, self.root, self.settings, self.python = name, root, settings, python
        self.token: str | None = None  # given with --token/--token-file; else minted where needed
        self.venv_cache: str | None = None  # install --venv-cache (engine.deploy.prepare)

    # -- host-side paths (strings: they may name another machine) --
    def _base(self) -> str:
        return f"{self.root.rstrip('/')}/{BASE}"

    def _release(self, version: str) -> str:
        return f"{self._base()}/releases/{version}"

    def _remote(self, op: str, *args: str, cwd: str | None = None) -> str:
        s = self.settings
        argv = [self.python, "-E", "-s", "-m", "engine.deploy.remote", op, "--root", self.root,
                "--health-timeout", str(s.health_timeout_s), "--stop-timeout", str(s.stop_timeout_s),
                "--keep", str(s.keep_releases), *args]
        q = shlex.quote
        # A given token travels on stdin (a command line is visible to `ps`).
        take_token = f"IFS= read -r {tokens.ENV} && export {tokens.ENV} && " if self.token else ""
        if cwd:
            return f"{take_token}cd {q(cwd)} && {shlex.join(argv)}"
        # From `current`, else the newest complete release: the installer code
        # ships with each release, so any installed one can answer.
        return (f"{take_token}cd {q(self._base())} 2>/dev/null && "
                f"if [ -e current/{INSTALLED} ]; then d=current; "
                f"else d=$(ls -1dt releases/*/{INSTALLED} 2>/dev/null | head -n 1); d=${{d%/{INSTALLED}}}; fi && "
                f'[ -n "$d" ] && cd "$d" && {shlex.join(argv)}')

    def _run(self, command: str, timeout_s: float, stream: bool = False, stdin: str | None = None
             ) -> tuple[int, str, str]:
        raise NotImplementedError

    def shell(self, command: str, timeout_s: float | None = None) -> tuple[int, str, str]:
        """A shell command on the host: (exit code, stdout, stderr). What the
        balancer host's operations (engine.deploy.balancer_host) run."""
        return self._run(command, self.settings.command_timeout_s if timeout_s is None else timeout_s)

    def _token_stdin(self) -> str | None:
        return f"{self.token}\n" if self.token else None

    def _ensure_release(self, bundle: Bundle, say: Say) -> None:
        raise NotImplementedError

    def url(self, bundle_manifest: dict) -> str | None:
        """Where the deployer itself can reach the engine, or None."""
        return None

    def close(self) -> None:
        pass

    # -- operations --
    def install(self, bundle: Bundle, say: Say) -> HostResult:
        t0 = time.monotonic()
        self._ensure_release(bundle, say)
        say(self.name, f"installing release {bundle.version}")
        cache = ("--venv-cache", self.venv_cache) if self.venv_cache else ()
        code, out, err = self._run(self._remote("install", "--python", self.python, *cache,
                                                cwd=self._release(bundle.version)),
                                   self.settings.command_timeout_s, stdin=self._token_stdin())
        result = _parse_result(self.name, out, err, code)
        if result.ok:
            self._check_from_here(bundle, result, say)
        result.seconds = round(time.monotonic() - t0, 2)
        return result

    def _check_from_here(self, bundle: Bundle, result: HostResult, say: Say) -> None:
        url = self.url(bundle.manifest)
        if url is None:
            return
        auth = bundle.manifest["engine"].get("auth") or {}
        try:
            token = None if auth.get("open_health", True) else self.deployer_token(auth)
            verify.wait_ready(url, min(10.0, self.settings.health_timeout_s), token=token)
            result.steps.append(f"ready from the deployer at {url}")
        except DeployError as exc:
            # The host verified itself; a network path problem is not cured by
            # a rollback, so report it and leave the release active.
            result.status, result.reason = "failed", f"serves on the host but not reachable from here: {exc}"

    def read_active(self, rel: str) -> str:
        """A file of the active release (e.g. a model's smoke reference)."""
        path = f"{self._base()}/current/{rel}"
        code, out, err = self._run(f"cat {shlex.quote(path)}", self.settings.command_timeout_s)
        if code != 0:
            raise DeployError(f"cannot read {rel} of the active release: {err.strip()[-200:]}",
                              where=f"{self.name}:{path}", hint="is a release deployed here? (invoke status)")
        return out

    def deployer_token(self, auth: dict, lifetime_s: float = tokens.LIFETIME_S) -> str | None:
        """The bearer token for the deployer's own requests to this host's
        engine: None with auth off, the given one, else minted from the
        secret file the host's engine reads."""
        if not auth.get("enabled"):
            return None
        if self.token:
            return self.token
        if tokens.hmac_algorithm(auth) is None:
            raise tokens.no_key_error(auth)
        return tokens.mint(auth, self._host_secret(auth["secret_file"]), lifetime_s)

    def _host_secret(self, secret_file: str) -> bytes:
        path = str(tokens.on_host(Path(self.root), secret_file))
        code, out, err = self._run(f"cat {shlex.quote(path)}", self.settings.command_timeout_s)
        if code != 0 or not out.strip():
            raise DeployError(f"cannot read the JWT secret to sign the deployer's token: {err.strip()[-200:] or 'empty'}",
                              where=f"{self.name}:{path}", hint="install engine.auth.secret_file on the host")
        return out.strip().encode()

    def follow_log(self, lines: int) -> int:
        """Print the engine log's last lines, then follow it until interrupted."""
        log = f"{self.root.rstrip('/')}/{LOGFILE}"
        return self._run(f"tail -n {int(lines)} -F {shlex.quote(log)}", None, stream=True)[0]

    def operate(self, op: str, *args: str, stream: bool = False) -> HostResult:
        """rollback | stop | status | logs on the host."""
        timeout = None if stream else self.settings.command_timeout_s
        code, out, err = self._run(self._remote(op, *args), timeout, stream=stream, stdin=self._token_stdin())
        if code != 0 and RESULT_PREFIX not in out:
            reason = (err or out).strip().splitlines()[-1:] or ["nothing deployed here"]
            if not err.strip() and not out.strip():
                reason = [f"nothing deployed under {self.root}"]
            return HostResult(self.name, "failed", reason=reason[0])
        result = _parse_result(self.name, out, err, code)
        if op == "logs":
            result.data["text"] = out.split(RESULT_PREFIX)[0]
        return result


class LocalTarget(Target):
    kind = "local"

    def __init__(self, name: str, root: Path, settings: Settings, python: str | None = None):
        # The interpreter the venv was made from, not the venv: the host side
        # must work with a bare python3 and nothing installed.
        super().__init__(name, str(Path(root).resolve()), settings,
                         python or getattr(sys, "_base_executable", sys.executable))
        # This machine's user cache: a new local root (a second one, or after
        # `make clean`) links the venv of the same wheels in instead of pip.
        cache = wheelcache.cache_dir()
        self.venv_cache = str(cache / "venvs") if cache is not None else None

    def _run(self, command: str, timeout_s: float | None, stream: bool = False, stdin: str | None = None
             ) -> tuple[int, str, str]:
        if stream:
            return subprocess.run(["bash", "-c", command], input=stdin, text=True).returncode, "", ""
        try:
            proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout_s,
                                  input=stdin if stdin is not None else "",
                                  env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
        except subprocess.TimeoutExpired:
            raise DeployError(f"host-side command still running after {timeout_s:g} s (deploy.command_timeout_s)",
                              where=self.name) from None
        return proc.returncode, proc.stdout, proc.stderr

    def _ensure_release(self, bundle: Bundle, say: Say) -> None:
        release = Path(self._release(bundle.version))
        if (release / INSTALLED).is_file():
            return
        say(self.name, f"extracting {bundle.path.name}")
        if release.exists():
            subprocess.run(["rm", "-rf", str(release)], check=True)  # an interrupted earlier attempt
        extract(bundle.path, release)


class SSHTarget(Target):
    kind = "ssh"

    def __init__(self, name: str, host: dict, settings: Settings, host_keys: HostKeyPolicy,
                 jump: dict | None = None):
        super().__init__(name, host.get("root") or "/", settings)
        self.host, self.jump, self.host_keys = host, jump, host_keys
        self._conn = None

    def _connection_for(self, host: dict, name: str, gateway=None):
        """A Fabric Connection (not yet open) held to the host's expected key,
        and that expectation (None: trust on first use)."""
        t = self.settings.connect_timeout_s
        kwargs = {"banner_timeout": t, "auth_timeout": t, "channel_timeout": t}
        if host.get("key_file"):
            kwargs.update(key_filename=[str(host["key_file"])], look_for_keys=False, allow_agent=False)
        port = host.get("port") or 22
        conn = Connection(host["address"], user=host.get("user") or "root", port=port,
                          connect_timeout=t, connect_kwargs=kwargs, gateway=gateway)
        expected = self.host_keys.prepare(conn.client, name, host["address"], port, host.get("host_key"))
        return conn, expected

    def connection(self):
        if self._conn is None:
            gateway, jump_expected = self._connection_for(self.jump, self.jump["name"]) if self.jump else (None, None)
            conn, expected = self._connection_for(self.host, self.name, gateway)
            try:
                conn.open()
            except BadHostKeyException as exc:
                conn.close()
                at_jump = gateway is not None and not gateway.is_connected
                if at_jump:
                    raise self.host_keys.mismatch(self.name, exc, jump_expected,
                                                  via=f" (jump host {self.jump['name']})") from None
                raise self.host_keys.mismatch(self.name, exc, expected) from None
            except Exception as exc:  # noqa: BLE001 - socket, paramiko and DNS errors all mean "unreachable"
                conn.close()
                via = f" via {self.jump['address']}" if self.jump else ""
                raise HostUnreachable(f"cannot connect to {self.host['address']}:{self.host.get('port') or 22}{via} "
                                      f"within {self.settings.connect_timeout_s:g} s: "
                                      f"{type(exc).__name__}: {exc}") from None
            self._conn = conn
        return self._conn

    def _run(self, command: str, timeout_s: float | None, stream: bool = False, stdin: str | None = None
             ) -> tuple[int, str, str]:
        try:
            res = self.connection().run(command, warn=True, hide=not stream, timeout=timeout_s,
                                        in_stream=io.StringIO(stdin) if stdin is not None else False)
        except CommandTimedOut:
            raise DeployError(f"host-side command still running after {timeout_s:g} s (deploy.command_timeout_s)",
                              where=self.name) from None
        return res.exited, res.stdout, res.stderr

    def _ensure_release(self, bundle: Bundle, say: Say) -> None:
        release = self._release(bundle.version)
        code, _, _ = self._run(f"test -f {shlex.quote(release + '/' + INSTALLED)}", self.settings.connect_timeout_s)
        if code == 0:
            return
        incoming = f"{self._base()}/incoming"
        remote_bundle = f"{incoming}/{bundle.path.name}"
        self._run(f"mkdir -p {shlex.quote(incoming)}", self.settings.command_timeout_s)
        say(self.name, f"uploading {bundle.path.name} ({bundle.size / 1e6:.1f} MB)")
        self._upload(bundle.path, remote_bundle)
        q = shlex.quote
        code, out, err = self._run(f"rm -rf {q(release)} && mkdir -p {q(release)} && "
                                   f"tar -xzf {q(remote_bundle)} -C {q(release)} --no-same-owner && "
                                   f"rm -f {q(remote_bundle)}", self.settings.command_timeout_s)
        if code != 0:
            raise DeployError(f"extracting the bundle failed (exit {code}): {(err or out).strip()[-300:]}",
                              where=f"{self.name}:{release}")

    def _upload(self, local: Path, remote: str) -> None:
        """sftp put, given up after deploy.transfer_timeout_s: a host that stops
        taking data (hung sshd, dropped link) would otherwise block its
        thread forever, since a stalled TCP stream raises nothing. A
        watchdog closes the transport, which makes the blocked put fail."""
        conn = self.connection()
        limit = self.settings.transfer_timeout_s
        fired = threading.Event()

        def abort() -> None:
            fired.set()
            transport = conn.client.get_transport()
            if transport is not None:
                transport.close()

        watchdog = threading.Timer(limit, abort)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.put(str(local), remote)
        except Exception as exc:  # noqa: BLE001 - sftp, socket and EOF errors alike
            if not fired.is_set():
                raise DeployError(f"uploading the bundle failed: {type(exc).__name__}: {exc}",
                                  where=f"{self.name}:{remote}") from None
        finally:
            watchdog.cancel()
        if fired.is_set():
            self.close()
            raise DeployError(f"uploading the bundle did not finish within {limit:g} s "
                              f"(deploy.transfer_timeout_s): the host stopped taking data or is too slow",
                              where=f"{self.name}:{remote}", hint="check the host and the link, or raise the limit")

    def url(self, bundle_manifest: dict) -> str | None:
        listen = bundle_manifest["engine"]["listen"]
        if listen.startswith("127.") or listen in ("localhost", "::1"):
            return None  # loopback-only engine: only the host itself can check it
        return f"http://{self.host['address']}:{bundle_manifest['engine']['http_port']}"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _parse_jump(text: str, hosts: dict[str, dict], via: dict) -> dict:
    """The jump host: another host of the spec (its own key_file and
    host_key), or user@host:port, which logs in with the key_file of the host
    it leads to (`via`) and whose host key is checked against
    deploy.known_hosts / trusted on first use."""
    if text in hosts:
        return hosts[text]
    user, _, rest = text.rpartition("@")
    address, _, port = rest.partition(":")
    return {"name": text, "address": address, "user": user or "root", "port": int(port) if port else 22,
            "key_file": via.get("key_file")}


def host_key_policy(spec, build_dir: Path, say=lambda host, msg: None) -> HostKeyPolicy:
    """The spec's host-key policy; keys trusted on first use go to BUILD/deploy/known_hosts."""
    known = spec.data["deploy"].get("known_hosts")  # absolute: the spec loader resolved it
    return HostKeyPolicy(Path(build_dir) / "deploy" / "known_hosts", Path(known) if known else None, say)


def make_targets(spec, names: list[str] | None, settings: Settings, host_keys: HostKeyPolicy) -> list[Target]:
    """Targets from the spec's hosts (all, or those named), in spec order."""
    every = {h["name"]: h for h in spec.data["hosts"]}
    # The engine goes to engine hosts; a balancer host runs HAProxy (its haproxy.cfg comes from render).
    hosts = {n: h for n, h in every.items() if h.get("role", "engine") == "engine"}
    if not hosts:
        raise DeployError("the spec lists no hosts" if not every else "the spec lists no engine hosts", where="hosts",
                          hint="add a local or ssh host (role engine, the default) to the spec")
    unknown = [n for n in names or [] if n not in every]
    if unknown:
        raise DeployError(f"unknown host {unknown[0]!r}", where="--host", hint=f"the spec has: {', '.join(every)}")
    balancers = [n for n in names or [] if n not in hosts]
    if balancers:
        raise DeployError(f"{balancers[0]!r} is a balancer host: the engine is deployed to engine hosts only",
                          where="--host", hint=f"engine hosts: {', '.join(hosts)}")
    return [_target_for(host, hosts, settings, host_keys) for name, host in hosts.items()
            if not names or name in names]


def _target_for(host: dict, jumps: dict[str, dict], settings: Settings, host_keys: HostKeyPolicy) -> Target:
    if host["type"] == "local":
        return LocalTarget(host["name"], host["root"], settings)
    jump = _parse_jump(host["jump_host"], jumps, host) if host.get("jump_host") else None
    return SSHTarget(host["name"], host, settings, host_keys, jump)


def make_balancer_targets(spec, settings: Settings, host_keys: HostKeyPolicy) -> list[Target]:
    """The hosts with role balancer, in spec order: the same transports
    (local root, SSH) as engine hosts, carrying HAProxy's operations."""
    every = {h["name"]: h for h in spec.data["hosts"]}
    return [_target_for(host, every, settings, host_keys) for host in every.values()
            if host.get("role", "engine") == "balancer"]


def guarded(action: Callable[[Target], HostResult], target: Target) -> HostResult:
    """One host's failure becomes its result; it never reaches the other hosts."""
    t0 = time.monotonic()
    try:
        result = action(target)
    except HostUnreachable as exc:
        result = HostResult(target.name, "unreachable", reason=str(exc))
    except DeployError as exc:
        result = HostResult(target.name, "failed", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - an SSH library error must not abort the fleet
        result = HostResult(target.name, "failed", reason=f"{type(exc).__name__}: {exc}")
    finally:
        target.close()
    if not result.seconds:
        result.seconds = round(time.monotonic() - t0, 2)
    return result


def run_fleet(targets: list[Target], action: Callable[[Target], HostResult], settings: Settings,
              on_done: Callable[[HostResult], None] = lambda r: None,
              canary_ramp: Callable[[Target, HostResult], HostResult] | None = None) -> list[HostResult]:
    """Run `action` on every target, at most settings.parallel at once; the
    canary (if configured and targeted) first and alone, then `canary_ramp`
    on its result when given (engine.deploy.canary.fleet_ramp). Once the failed
    fraction exceeds max_fail_fraction, no new host is started (running ones
    finish). Results come back in target order."""
    results: dict[str, HostResult] = {}
    total = len(targets)
    queue = deque(targets)
    canary = next((t for t in targets if t.name == settings.canary), None)
    stop_reason = ""
    if canary is not None and total > 1:
        queue.remove(canary)
        results[canary.name] = guarded(action, canary)
        if canary_ramp is not None and results[canary.name].ok:
            results[canary.name] = guarded(lambda t: canary_ramp(t, results[canary.name]), canary)
        on_done(results[canary.name])
        if not results[canary.name].ok:
            stop_reason = f"not started: canary {canary.name} failed"
    failed = sum(1 for r in results.values() if not r.ok)
    with ThreadPoolExecutor(max_workers=max(1, settings.parallel), thread_name_prefix="deploy") as pool:
        running: dict[Future, Target] = {}
        while (queue and not stop_reason) or running:
            while queue and not stop_reason and len(running) < settings.parallel:
                target = queue.popleft()
                running[pool.submit(guarded, action, target)] = target
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                running.pop(future)
                result = future.result()
                results[result.name] = result
                on_done(result)
                failed += not result.ok
            if failed / total > settings.max_fail_fraction and queue and not stop_reason:
                stop_reason = (f"not started: {failed} of {total} hosts failed "
                               f"(deploy.max_fail_fraction {settings.max_fail_fraction:g})")
    for target in queue:
        results[target.name] = HostResult(target.name, "skipped", reason=stop_reason)
        on_done(results[target.name])
    return [results[t.name] for t in targets]
