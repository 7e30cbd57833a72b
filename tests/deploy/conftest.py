"""Deploy test fixtures: real sshd hosts in network namespaces, one bundle per session.

Each SSH test host is a network namespace `aie-dep-hN` joined to the root
namespace by a veth pair (10.233.(10+N).1 <-> .2, /30), running a real
`/usr/sbin/sshd -D` with its own host key, accepting one generated client
key for root, listening on port 22 and on JUMP_PORT (to reach a host as a
user@host:port jump host), with its own root directory under the session's
tmp. The "stall" host is a live one that a test freezes mid-upload. The
"dead" host is a namespace whose address answers nothing (a blackhole route
for replies), so connecting to it times out. Everything is torn down on exit,
on failure too: processes in the namespaces are killed, veths and
namespaces deleted.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SSHD = Path("/usr/sbin/sshd")
LIVE_HOSTS = ("h1", "h2", "h3", "h4", "h5", "stall")
DEAD = "dead"
HTTP_PORT = 18700  # per namespace, so it cannot clash with anything on this machine
JUMP_PORT = 2222   # every test sshd listens here too


@dataclass(frozen=True)
class TestHost:
    name: str
    netns: str
    address: str
    root: Path

    @property
    def host_key_pub(self) -> str:
        """The sshd's public host key line (what a spec pins)."""
        return (self.root.parent / "host_key.pub").read_text().strip()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _netns_pids(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split()]


def _remove_host_net(netns: str, veth: str) -> None:
    for pid in _netns_pids(netns):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    _ip("link", "del", veth, check=False)
    _ip("netns", "del", netns, check=False)


def _wait_banner(address: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, 22), timeout=1.0) as s:
                if s.recv(8).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {address} did not come up")
        time.sleep(0.1)


def _sshd_config(d: Path, address: str) -> Path:
    cfg = d / "sshd_config"
    cfg.write_text("\n".join([
        f"ListenAddress {address}", "Port 22", f"Port {JUMP_PORT}",
        f"HostKey {d / 'host_key'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d.parent / 'client_key.pub'}",
        "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no",  # the key lives under pytest's tmp, not ~/.ssh
        "Subsystem sftp internal-sftp", "MaxStartups 50", "LogLevel ERROR", "",
    ]))
    return cfg


def _host_netns(name: str, i: int, base: Path, procs: list, created: list, dead: bool = False) -> TestHost:
    """Namespace aie-dep-NAME joined to the root namespace by a veth pair
    (10.233.I.1 <-> .2), running sshd unless `dead`; what was made is
    appended to procs and created for the teardown."""
    netns, veth = f"aie-dep-{name}", f"aie-dep-{name}a"
    _remove_host_net(netns, veth)  # left over from an interrupted session
    created.append((netns, veth))
    _ip("netns", "add", netns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", f"aie-dep-{name}b")
    _ip("link", "set", f"aie-dep-{name}b", "netns", netns)
    _ip("addr", "add", f"10.233.{i}.1/30", "dev", veth)
    _ip("link", "set", veth, "up")
    _ip("-n", netns, "addr", "add", f"10.233.{i}.2/30", "dev", f"aie-dep-{name}b")
    _ip("-n", netns, "link", "set", f"aie-dep-{name}b", "up")
    _ip("-n", netns, "link", "set", "lo", "up")
    address = f"10.233.{i}.2"
    d = base / name
    d.mkdir()
    host = TestHost(name, netns, address, d / "root")
    if dead:
        # Replies vanish: a SYN is answered by nothing, so connect() times out.
        _ip("-n", netns, "route", "add", "blackhole", f"10.233.{i}.1/32")
        return host
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
    cfg = _sshd_config(d, address)
    subprocess.run([str(SSHD), "-t", "-f", str(cfg)], check=True)
    procs.append(subprocess.Popen(["ip", "netns", "exec", netns, str(SSHD), "-D", "-f", str(cfg),
                                   "-E", str(d / "sshd.log")]))
    return host


def _teardown(procs: list, created: list) -> None:
    for proc in procs:
        proc.terminate()
    for netns, veth in created:
        _remove_host_net(netns, veth)
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory):
    """{name: TestHost} for h1..h5 and stall (sshd running) and 'dead' (times out)."""
    if os.geteuid() != 0:
        pytest.skip("deploy SSH tests need root to create network namespaces and run sshd")
    if not SSHD.exists() or shutil.which("ip") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("deploy SSH tests need /usr/sbin/sshd, ip and ssh-keygen (make sysdeps installs openssh-server)")
    base = tmp_path_factory.mktemp("sshhosts")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "client_key")], check=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    hosts, procs, created = {}, [], []
    try:
        for i, name in enumerate((*LIVE_HOSTS, DEAD), start=11):
            hosts[name] = _host_netns(name, i, base, procs, created, dead=name == DEAD)
        for name in LIVE_HOSTS:
            _wait_banner(hosts[name].address)
        yield hosts
    finally:
        _teardown(procs, created)


@pytest.fixture(scope="module")
def balancer_host(ssh_hosts, tmp_path_factory, request):
    """A balancer host in its own namespace (aie-dep-lb, sshd as on the
    engine hosts) that reaches the engine hosts the module names in
    BALANCED at their own addresses. This machine does not forward between
    namespaces (net.ipv4.ip_forward=0, which the tests leave alone), so each
    engine namespace gets a second veth straight into the balancer's (its
    own L2 segment, 10.234.I.1 <-> .2): the balancer routes the engine's
    address onto it, the engine answers on it. Torn down with the module."""
    base = tmp_path_factory.mktemp("lbhost")
    (base / "client_key.pub").write_bytes((ssh_hosts["h1"].root.parent.parent / "client_key.pub").read_bytes())
    procs, created = [], []
    try:
        host = _host_netns("lb", 30, base, procs, created)
        for name in request.module.BALANCED:
            engine = ssh_hosts[name]
            i = int(engine.address.split(".")[2])
            lb_end, engine_end = f"aie-lb-{name}a", f"aie-lb-{name}b"
            _ip("-n", host.netns, "link", "add", lb_end, "type", "veth", "peer", "name", engine_end,
                "netns", engine.netns)
            _ip("-n", host.netns, "addr", "add", f"10.234.{i}.1/30", "dev", lb_end)
            _ip("-n", engine.netns, "addr", "add", f"10.234.{i}.2/30", "dev", engine_end)
            _ip("-n", host.netns, "link", "set", lb_end, "up")
            _ip("-n", engine.netns, "link", "set", engine_end, "up")
            _ip("-n", host.netns, "route", "add", f"{engine.address}/32", "via", f"10.234.{i}.2")
        _wait_banner(host.address)
        yield host
    finally:
        # Deleting the balancer's namespace deletes its veth ends, and with them their peers.
        _teardown(procs, created)


@pytest.fixture(scope="session")
def kernels_lib() -> Path:
    """The kernel library directory the bundles ship: AIE_KERNELS_LIB's (a
    helper's own build), else build/lib brought up to date by make (under
    `make test` the objects exist already, so this only links)."""
    env = os.environ.get("AIE_KERNELS_LIB")
    if env:
        return Path(env).parent
    proc = subprocess.run(["make", "-C", str(REPO / "kernels"), f"-j{os.cpu_count() or 1}", "cpu"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return REPO / "build" / "lib"


def requirement_closure(req_file: Path) -> set[str]:
    """The distributions a requirement file installs, with everything they
    depend on (canonical names), read from this venv's installed metadata:
    the same pinned versions the bundle's `pip wheel` resolves."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo = [line.split("#")[0].strip() for line in req_file.read_text().splitlines()]
    todo = [canonicalize_name(Requirement(line).name) for line in todo if line]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


HOST_DISTS = requirement_closure(REPO / "requirements" / "host.in")
# The build machine's own packages (requirements/build.in and what only they
# pull in: ml_dtypes, paramiko, pygments, ...): a host never gets one.
BUILD_ONLY_DISTS = requirement_closure(REPO / "requirements" / "build.in") - HOST_DISTS


def venv_dists(venv: Path) -> set[str]:
    """The distributions installed in a host's venv (canonical names), asked
    of its own python, isolated from this test's environment (-I)."""
    from packaging.utils import canonicalize_name

    code = "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"
    proc = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return {canonicalize_name(name) for name in proc.stdout.split()}


def assert_runtime_only(venv: Path) -> None:
    """A host's venv holds the engine and requirements/host.in's closure:
    nothing of the build machine's (onnx, invoke, fabric, rich, ...)."""
    have = venv_dists(venv)
    assert not have & BUILD_ONLY_DISTS, f"build-machine packages in a host venv: {sorted(have & BUILD_ONLY_DISTS)}"
    assert have == HOST_DISTS | {"ai-engine"}, (sorted(have - HOST_DISTS), sorted(HOST_DISTS - have))


def write_site(path: Path, hosts: list[dict], *, listen: str, http_port: int, extra: dict | None = None) -> Path:
    site = {
        "engine": {
            "listen": listen, "http_port": http_port, "binary_port": http_port + 1,
            "models": [{"name": "digits", "source": str(REPO / "build" / "models" / "digits.onnx"),
                        "sample": str(REPO / "build" / "models" / "digits.sample.npy"),
                        "max_batch_size": 16, "instances": 1}],
            # Nothing balances these hosts (test_fleet_balancer sets its own
            # delay): the default 5 s before the listeners close would only
            # add 5 s to every restart and stop.
            "limits": {"drain_delay_s": 0},
        },
        "hosts": hosts,
        "deploy": {"parallel": 4, "max_fail_fraction": 0.5, "connect_timeout_s": 3, "command_timeout_s": 300,
                   "health_timeout_s": 40, "keep_releases": 3, **(extra or {})},
    }
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def digits_model(zoo):
    return zoo("digits")


@pytest.fixture(scope="session")
def fleet_spec(ssh_hosts, tmp_path_factory, digits_model):
    """Spec files [default, site] listing every test host (one bundle serves all tests).

    Host keys: h1 pins its key as a public key line, h2 as a known_hosts file;
    the others are trusted on first use. Extra entries reach the same
    namespaces another way: through jump hosts (sshd forwards to its own
    address, so no routing between namespaces is needed) and with a wrong pin."""
    d = tmp_path_factory.mktemp("fleetspec")
    key = ssh_hosts["h1"].root.parent.parent / "client_key"
    hosts = [{"name": h.name, "type": "ssh", "address": h.address, "user": "root", "key_file": str(key),
              "root": str(h.root)} for h in ssh_hosts.values()]
    h1, h2, h3 = ssh_hosts["h1"], ssh_hosts["h2"], ssh_hosts["h3"]
    hosts[0]["host_key"] = h1.host_key_pub
    (d / "h2_known_hosts").write_text(f"# h2 only\n{h2.address} {h2.host_key_pub}\n")
    hosts[1]["host_key"] = str(d / "h2_known_hosts")
    extra = [
        {"name": "h1-via-jump", "address": h1.address, "root": str(h1.root), "jump_host": "h1"},
        {"name": "h2-via-port-jump", "address": h2.address, "root": str(h2.root),
         "jump_host": f"root@{h2.address}:{JUMP_PORT}"},
        {"name": "h1-wrong-pin", "address": h1.address, "root": str(h1.root), "host_key": h2.host_key_pub},
        {"name": "h3-via-wrong-jump", "address": h3.address, "root": str(h3.root), "jump_host": "h1-wrong-pin"},
    ]
    hosts += [{"type": "ssh", "user": "root", "key_file": str(key), **h} for h in extra]
    site = write_site(d / "site.yaml", hosts, listen="0.0.0.0", http_port=HTTP_PORT)
    return [REPO / "sysconfig" / "spec.yaml", site]


@pytest.fixture(scope="session")
def fleet_bundle(fleet_spec, deploy_build, kernels_lib):
    """Built once: other work in the tree may change engine sources mid-session,
    and these tests are about hosts, not about rebuilding."""
    from engine.deploy.pipeline import Options, Pipeline
    from engine.deploy.report import Reporter

    opts = Options(specs=fleet_spec, build_dir=deploy_build, lib_dir=kernels_lib)
    return Pipeline(opts, Reporter(quiet=True)).bundle().path


@pytest.fixture(scope="session")
def pipeline_for(fleet_spec, deploy_build, fleet_bundle, kernels_lib):
    """Pipeline(hosts, version=None, reporter=None, build_dir=None): the fleet
    bundle, or a fresh one stamped `version`; quiet unless given a reporter."""
    from engine.deploy.pipeline import Options, Pipeline
    from engine.deploy.report import Reporter

    def make(hosts: list[str], version: str | None = None, reporter=None, build_dir: Path | None = None):
        opts = Options(specs=fleet_spec, hosts=hosts, build_dir=build_dir or deploy_build, lib_dir=kernels_lib,
                       version=version, bundle=None if version else fleet_bundle)
        return Pipeline(opts, reporter or Reporter(quiet=True))
    return make


def recording_reporter():
    """A Reporter whose output a test can read: (reporter, buffer)."""
    import io

    from rich.console import Console

    from engine.deploy.report import Reporter

    buffer = io.StringIO()
    return Reporter(Console(file=buffer, width=1000, soft_wrap=True, highlight=False)), buffer


@pytest.fixture(scope="session")
def deploy_build(tmp_path_factory):
    """One build dir per session: wheels and bundles are built once and reused."""
    return tmp_path_factory.mktemp("deploybuild")
