"""Provisioning HAProxy on a balancer host (engine.deploy.balancer_host):
the rendered config installed into the host's root and HAProxy started, a
changed config applied with a graceful reload while a steady stream of HTTP
and binary requests flows through it (none may fail), an unchanged one left
alone, a config HAProxy refuses changing nothing. The rollout step that
drains each host (engine.deploy.balancer_rollout) runs through deploy in
tests/deploy/test_fleet_balancer.py.

The balancer host is a local root (HAProxy supervised as on a host without
systemd), its runtime API reached through the host's shell as over SSH; two
real engines on loopback aliases behind it."""

from __future__ import annotations

import json
import os
import signal
from types import SimpleNamespace

import pytest
from invoke import Context, Exit

import tasks
from engine.deploy import DeployError
from engine.deploy.balancer_host import CONFIG, BalancerHost
from engine.deploy.balancer_rollout import Rollout
from engine.deploy.supervise import wait_exit
from engine.deploy.targets import HostResult, LocalTarget, Settings
from hostspec.loader import load_spec
from hostspec.render import render_tree
from serve_support import ports_free_on
from fleet_support import HAPROXY, Stream

pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (make sysdeps installs it)")
ENGINES = {"e1": "127.0.0.2", "e2": "127.0.0.3"}


class Site:
    """Two engines, a spec with a local balancer host, its BalancerHost."""

    def __init__(self, serve_factory, mlp_file, tmp_path, engines=True):
        self.serve_factory, self.mlp_file, self.tmp = serve_factory, mlp_file, tmp_path
        self.http_port, self.binary_port, self.lb_http, self.lb_binary = ports_free_on(
            ["127.0.0.1", *ENGINES.values()], 4)
        self.engines = {name: self.start_engine(name) for name in ENGINES} if engines else {}
        self.root = tmp_path / "lbroot"
        self.socket = str(tmp_path / "admin.sock")
        self.host = BalancerHost(LocalTarget("lb", self.root, Settings()), self.socket, wait_s=20)
        self.events: list[str] = []

    def start_engine(self, name):
        # A drain delay as behind a real balancer (default 5 s), shortened.
        return self.serve_factory([{"name": "mlp", "path": str(self.mlp_file), "max_batch_size": 1}],
                                  listen=ENGINES[name], http_port=self.http_port, binary_port=self.binary_port,
                                  limits={"drain_delay_s": 0.5})

    def write_spec(self, interval="100ms", maxconn=2000, engines=ENGINES):
        spec = self.tmp / "site.yaml"
        spec.write_text(json.dumps({
            "version": 1,
            "engine": {"listen": "0.0.0.0", "http_port": self.http_port, "binary_port": self.binary_port},
            "hosts": [{"name": "lb", "type": "local", "root": str(self.root), "role": "balancer"}] +
                     [{"name": n, "type": "ssh", "address": a} for n, a in engines.items()],
            # maxconn within this sandbox's file limit (HAProxy needs ~2 fds a connection)
            "balancer": {"listen": "127.0.0.1", "http_port": self.lb_http, "binary_port": self.lb_binary,
                         "maxconn": maxconn, "runtime_socket": self.socket,
                         "health": {"interval_s": interval, "rise": 1, "fall": 2}}}))
        return spec

    def files(self, interval="100ms"):
        spec = self.write_spec(interval)
        return {rel: (f.content, f.mode) for rel, f in render_tree(load_spec([str(spec)]), role="balancer").items()}

    def provision(self, files) -> HostResult:
        return self.host.provision(files, lambda host, message: self.events.append(message))

    def close(self):
        pid = self.host.probe([]).pid
        if pid is not None:
            os.kill(pid, signal.SIGTERM)   # the master stops its workers
            wait_exit(pid, 10)


@pytest.fixture
def site(serve_factory, mlp_file, tmp_path):
    s = Site(serve_factory, mlp_file, tmp_path)
    yield s
    s.close()


@pytest.fixture
def bare_site(mlp_file, tmp_path):
    """The site without engines: provisioning HAProxy does not need them."""
    s = Site(None, mlp_file, tmp_path, engines=False)
    yield s
    s.close()


def _streams(site):
    target = SimpleNamespace(lb_http=site.lb_http, lb_binary=site.lb_binary, mlp_file=site.mlp_file)
    streams = [Stream(target, "http", resend_on_idle_close=True), Stream(target, "binary")]
    for s in streams:
        s.start()
    return streams


def _finish(streams):
    for s in streams:
        s.stop.set()
        s.join(30)
    return sum(s.ok for s in streams), [f for s in streams for f in s.failures]


def test_provision_starts_then_reloads_gracefully_and_refuses_a_bad_config(site):
    first = site.provision(site.files())
    assert first.status == "started", first
    assert (site.root / CONFIG).read_bytes() == site.files()[CONFIG][0]
    assert (site.root / "etc/prometheus/file_sd/ai-engine.json").is_file()
    api = site.host.api()
    assert all(api.wait_status(n, "UP", 20) for n in ENGINES), api.stats()

    streams = _streams(site)
    for s in streams:
        s.wait_answers(20)
    worker = site.host.worker_pid()
    reloaded = site.provision(site.files(interval="150ms"))
    assert reloaded.status == "reloaded", reloaded
    assert site.host.worker_pid() not in (None, worker)
    assert reloaded.pid == first.pid       # the same master: a reload, not a restart
    for s in streams:
        s.wait_answers(20)                 # served by the new worker

    again = site.provision(site.files(interval="150ms"))
    assert again.status == "unchanged" and again.steps == [], again

    live = (site.root / CONFIG).read_bytes()
    worker = site.host.worker_pid()
    bad = {CONFIG: (live.replace(b"balance leastconn", b"balance nosuch", 1), 0o644)}
    with pytest.raises(DeployError) as refused:
        site.provision(bad)
    message = str(refused.value)
    assert "HAProxy refused the new config, nothing was changed" in message and "balance" in message, message
    assert "\n" not in message
    assert (site.root / CONFIG).read_bytes() == live
    assert sorted(p.name for p in (site.root / CONFIG).parent.iterdir()) == ["haproxy.cfg"]
    assert site.host.worker_pid() == worker
    for s in streams:
        s.wait_answers(10)

    total, failures = _finish(streams)
    print(f"\ngraceful reload under a steady HTTP + binary stream: {total} answers, {len(failures)} failed, "
          f"{streams[0].resent} HTTP requests resent on a new connection after an idle one was closed")
    assert failures == []


def _invoke_provision(site, capfd, check=False, **spec) -> tuple[int, str, str]:
    """`invoke provision` on the site's spec: (exit code, stdout, stderr)."""
    path = site.write_spec(**spec)
    capfd.readouterr()
    try:
        tasks.provision(Context(), spec=[str(path)], root=str(site.tmp / "engine-root"), check=check)
        code = 0
    except Exit as exc:
        code = exc.code
    out, err = capfd.readouterr()
    return code, out, err


def test_invoke_provision_starts_then_reloads_haproxy_and_check_changes_nothing(bare_site, capfd):
    site = bare_site
    code, out, _ = _invoke_provision(site, capfd, check=True)
    assert code == 2, out                              # drift: nothing installed, HAProxy not running
    assert "+++ lb:" in out and "+frontend ai_engine_http" in out, out
    assert "HAProxy is not running: provision starts it" in out
    assert not (site.root / CONFIG).exists() and site.host.probe([]).pid is None

    code, out, err = _invoke_provision(site, capfd)
    assert code == 0 and "lb: HAProxy started" in out, out + err
    master = site.host.probe([]).pid
    api = site.host.api()
    assert api.info()["Maxconn"] == "2000"
    assert not (site.tmp / "engine-root" / CONFIG).exists()   # ROOT gets the engine host's files only

    code, out, _ = _invoke_provision(site, capfd)
    assert code == 0 and "lb: HAProxy unchanged" in out, out
    assert _invoke_provision(site, capfd, check=True)[0] == 0   # in sync

    worker = site.host.worker_pid()
    code, out, _ = _invoke_provision(site, capfd, check=True, maxconn=1900)
    assert code == 2 and "-    maxconn 2000" in out and "+    maxconn 1900" in out, out
    assert api.info()["Maxconn"] == "2000"              # check changed nothing
    code, out, _ = _invoke_provision(site, capfd, maxconn=1900)
    assert code == 0 and "lb: HAProxy reloaded" in out, out
    assert site.host.probe([]).pid == master and site.host.worker_pid() not in (None, worker)
    assert api.info()["Maxconn"] == "1900"              # the new config is what serves

    live, worker = (site.root / CONFIG).read_bytes(), site.host.worker_pid()
    # An address with a space in it would be a second word on haproxy.cfg's
    # server line (an injection): the spec refuses it before anything renders.
    code, out, err = _invoke_provision(site, capfd, maxconn=1900, engines={**ENGINES, "e3": "10.0.0.9 x"})
    assert code != 0, out + err
    assert "address: invalid value '10.0.0.9 x'" in out + err, out + err
    assert (site.root / CONFIG).read_bytes() == live and site.host.worker_pid() == worker


def test_rollout_never_takes_every_host_out():
    rollout = Rollout([], ["e1", "e2", "e3"], drain_timeout_s=10, up_timeout_s=20)
    assert rollout.parallel(4) == (2, "at most 2 of the 3 engine hosts behind the balancer out at once "
                                      "(deploy.parallel 4 lowered: never all of them)")
    assert rollout.parallel(2) == (2, None)
    assert Rollout([], ["e1"], 10, 20).parallel(4) == (
        1, "e1 is the only engine host behind the balancer: clients get no answer while it restarts")
