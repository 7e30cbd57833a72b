"""The README's path, walked as a new user would, twice over: in a fresh
`git clone` of this tree with a minimal environment (PATH, HOME, LANG; no
AIE_* or other test variables; HOME an empty directory, as a new user's:
no caches), `make deploy`, `make deploy` again (nothing
rebuilt, same engine), an overlay edit (a new release whose change the
engine serves), `invoke rollback`, `status`, `logs`, `bench`, `make clean`
while the engine runs (it stops it), `make deploy` from clean, `invoke stop`.

Everything runs in a network namespace of its own (only loopback), so the
default spec's 127.0.0.1:8000 cannot clash with an engine on this machine.
With no network there, the bundle's dependency wheels come from a local
wheelhouse made beforehand from this machine's package index (the
environment then also carries PIP_FIND_LINKS and PIP_NO_INDEX: a mirror, as
an air-gapped site would configure; nothing else).

What is reused, and why it is legitimate: the clone's .venv is a fresh venv
whose site-packages point at this checkout's installed dependencies (pip
would install the same pinned versions, minutes later) plus the clone's own
sources, with the Makefile's install stamp in place; everything `make
deploy` does after bootstrap (zoo, kernels, convert, wheels, bundle, install)
runs for real in the clone. Both deploys from an empty build/ (step 1 and
step 9, after `make clean`) also find the kernels' objects of this
checkout's build when that build is current (`make -q` says so: the same
sources, the same flags), copied in newer than the clone's sources, so their
build-kernels step runs make and compiles nothing. Compiling every kernel
from nothing here would repeat, at ~160 s of CPU, what other runs do: `make
test` in a fresh clone (CI) builds the library and its C tests from nothing
before pytest starts, and tests/kernels/test_cross_aarch64.py builds the
whole portable library from nothing into an empty BUILD_DIR. Step 9
takes the dependency wheels and the release venv from the user's cache
(~/.cache/ai-engine under the fresh HOME), which `make clean` keeps, as any
user's deploy after `make clean` does; step 1 found that cache empty.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NETNS = f"aie-userpath-{os.getpid()}"
STEP_TIMEOUT_S = 900  # one make/invoke command; the whole walk is bounded by the sum
URL = "http://127.0.0.1:8000"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def netns():
    if os.geteuid() != 0:
        pytest.skip("the user-path test needs root for its network namespace (ip netns)")
    if shutil.which("ip") is None or shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("the user-path test needs ip, git and make")
    _run(["ip", "netns", "del", NETNS])
    proc = _run(["ip", "netns", "add", NETNS])
    if proc.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {proc.stderr.strip()}")
    try:
        _run(["ip", "-n", NETNS, "link", "set", "lo", "up"])
        yield NETNS
    finally:
        for pid in _run(["ip", "netns", "pids", NETNS]).stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        _run(["ip", "netns", "del", NETNS])


def _clone(dest: Path) -> Path:
    """A clone of the commit this tree is at, plus its uncommitted changes
    (tracked edits and new files), so the test walks the code under test."""
    head = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True).stdout.strip()
    _run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(dest)], check=True)
    _run(["git", "-C", str(dest), "checkout", "--quiet", head], check=True)
    diff = _run(["git", "-C", str(REPO), "diff", "HEAD", "--binary"], check=True).stdout
    if diff.strip():
        subprocess.run(["git", "-C", str(dest), "apply", "--whitespace=nowarn"], input=diff, text=True, check=True)
    new = _run(["git", "-C", str(REPO), "ls-files", "-o", "--exclude-standard", "-z"], check=True).stdout
    for rel in filter(None, new.split("\0")):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    return dest


def _wheelhouse(dest: Path) -> Path:
    """requirements/host.in's closure as wheels for the namespace's offline
    `pip wheel`: the session's cached dependency wheels when a deploy test
    built them already (the same inputs: engine.deploy.wheelcache), else
    fetched here, where the index is reachable."""
    from engine.deploy import DeployError, wheelcache, wheels
    from engine.deploy.pipeline import dependency_inputs

    key = dependency_inputs()
    if wheelcache.fetch("deps", key, dest) is None:
        try:
            wheelcache.store("deps", key, wheels.dependency_wheels(dest))
        except DeployError as exc:
            pytest.skip(f"cannot fetch the dependency wheels for the offline namespace: {exc}")
    return dest


def _venv(clone: Path) -> None:
    """clone/.venv: this checkout's dependencies, the clone's own code."""
    venv = clone / ".venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     check=True).stdout.strip())
    # A plain path line: the suite's editable finder for *its* engine is not loaded.
    (site / "aie_suite_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "aie_clone_src.pth").write_text(f"{clone}\n{clone / 'sysconfig'}\n")
    invoke = venv / "bin" / "invoke"
    invoke.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom invoke.main import program\n"
                      "sys.exit(program.run())\n")
    invoke.chmod(0o755)
    (venv / ".installed").touch()  # the Makefile's stamp: bootstrap done


def _seed_kernels(clone: Path) -> str:
    """Copy this checkout's current kernel build into the clone (see the
    module docstring); a build that is stale or absent is not copied."""
    build = REPO / "build"
    libs = [build / "lib" / name for name in ("libaie_kernels.a", "libaie_kernels.so", "libaie_kernels_cuda.a",
                                              "aie_kernels.fatbin")]
    libs = [lib for lib in libs if lib.is_file()]
    objects = build / "obj" / "kernels-rel"
    if len(libs) < 2 or not objects.is_dir() or \
            _run(["make", "-s", "-q", "-C", str(REPO / "kernels"), *map(str, libs)]).returncode != 0:
        return "not seeded: this checkout's kernel build is absent or not current"
    shutil.copytree(objects, clone / "build" / "obj" / "kernels-rel",
                    ignore=shutil.ignore_patterns("*.d"))  # their targets name this checkout's paths
    (clone / "build" / "lib").mkdir(parents=True, exist_ok=True)
    for lib in libs:
        shutil.copy2(lib, clone / "build" / "lib" / lib.name)
    now = time.time()
    for path in (clone / "build").rglob("*"):
        os.utime(path, (now, now))
    return f"seeded from this checkout's current build ({', '.join(lib.name for lib in libs)})"


class User:
    """Runs commands in the clone, inside the namespace, with a minimal environment."""

    def __init__(self, clone: Path, netns: str, wheelhouse: Path, home: Path):
        self.clone, self.netns = clone, netns
        home.mkdir(exist_ok=True)
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(home), "LANG": "C.UTF-8",
                    "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_INDEX": "1"}

    def run(self, *cmd: str, ok: bool = True, show: bool = True) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        proc = subprocess.run(["ip", "netns", "exec", self.netns, *cmd], cwd=self.clone, env=self.env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        if show:
            print(f"$ {' '.join(cmd)}  ({time.monotonic() - t0:.1f} s, exit {proc.returncode})")
        if ok:
            assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def http(self, path: str) -> tuple[int, dict]:
        """GET from inside the namespace: (status, JSON) or (0, {}) when nothing answers."""
        code = ("import json, sys, urllib.request, urllib.error\n"
                "try:\n"
                f"    r = urllib.request.urlopen('{URL}{path}', timeout=10); print(r.status); print(r.read().decode())\n"
                "except urllib.error.HTTPError as e:\n    print(e.code); print('{}')\n"
                "except OSError:\n    print(0); print('{}')\n")
        out = self.run(sys.executable, "-c", code, show=False).stdout.splitlines()
        return int(out[0]), json.loads(out[1] or "{}")

    @property
    def root(self) -> Path:
        return self.clone / "build" / "root"

    def pid(self) -> int | None:
        try:
            return int((self.root / "run/ai-engine.pid").read_text())
        except (OSError, ValueError):
            return None

    def release(self) -> str:
        return os.readlink(self.root / "opt/ai-engine/current").rsplit("/", 1)[-1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_readme_path_twice_in_a_fresh_clone(netns, tmp_path):
    t_start = time.monotonic()
    clone = _clone(tmp_path / "clone")
    _venv(clone)
    user = User(clone, netns, _wheelhouse(tmp_path / "wheelhouse"), tmp_path / "home")
    print(f"kernels {_seed_kernels(clone)}")

    # 1. make deploy, as the README says.
    first = user.run("make", "deploy")
    out = first.stdout
    assert re.search(r"zoo: digits\s+built in", out), out  # the zoo model built explicitly, not guessed
    assert f"local: engine serving at {URL} — model digits (POST {URL}/v2/models/digits/infer)" in out, out
    assert "local: sample: digit 7 → predicted 7" in out
    assert "\x1b[" not in out + first.stderr  # piped: no escape codes
    pid, release = user.pid(), user.release()
    assert pid and _alive(pid)
    assert user.http("/v2/health/ready")[0] == 200

    # 2. make deploy again: nothing rebuilt, the same engine.
    again = user.run("make", "deploy").stdout
    for step in ("build-kernels", "convert digits", "dependency wheels", "engine wheel", "bundle"):
        assert re.search(rf"✓ {re.escape(step)} .*unchanged, skipped", again), (step, again)
    assert re.search(r"│ local\s*│ " + release + r"\s*│ unchanged", again), again
    assert user.pid() == pid and user.release() == release

    # 3. An overlay edit: a new release serves the change. It touches only a
    # model's settings in engine.yaml, so the engine reloads it (SIGHUP) and
    # keeps its pid (engine/deploy/reload.py).
    site = clone / "sysconfig" / "site.yaml"  # beside spec.yaml: relative paths read the same either way
    site.write_text("engine:\n  models:\n    - name: digits\n      source: ../build/models/digits.onnx\n"
                    "      sample: ../build/models/digits.sample.npy\n      max_batch_size: 32\n")
    specs = ["--spec", "sysconfig/spec.yaml", "--spec", "sysconfig/site.yaml"]
    assert user.http("/v2/models/digits/config")[1]["max_batch_size"] == 64
    edited = user.run(".venv/bin/invoke", "deploy", *specs).stdout
    assert re.search(r"│ local\s*│ \w+\s*│ reloaded", edited), edited
    new_release = user.release()
    assert new_release != release
    assert user.http("/v2/models/digits/config")[1]["max_batch_size"] == 32
    assert user.pid() == pid

    # 4. invoke rollback: back to the first release and its config.
    back = user.run(".venv/bin/invoke", "rollback").stdout
    assert "switched" in back
    assert user.release() == release
    assert user.http("/v2/models/digits/config")[1]["max_batch_size"] == 64
    pid = user.pid()

    # 5. invoke status: the active release, its pid, ready.
    status = user.run(".venv/bin/invoke", "status").stdout
    assert re.search(rf"│ local\s*│ {release}\s*│ {pid}\s*│ ready", status), status
    assert new_release in status  # installed, for a roll forward

    # 6. invoke logs: exactly the lines asked for, each one JSON event.
    logs = user.run(".venv/bin/invoke", "logs", "--lines", "4").stdout.splitlines()
    assert len(logs) == 4 and all("event" in json.loads(line) for line in logs), logs

    # 7. invoke bench, short: every phase, the recovery one a single
    # recovery window (its default 10 s is ~10 s of this test's wall time).
    bench = user.run(".venv/bin/invoke", "bench", "--rate", "20", "--warmup-s", "0.5", "--steady-s", "1",
                     "--spike-s", "0.5", "--recovery-s", "1", "--workers", "4").stdout
    report = clone / "build" / "reports" / "bench-local.md"
    assert f"report: {report}" in bench, bench
    steady = next(line for line in report.read_text().splitlines() if line.startswith("| steady |"))
    cells = [c.strip() for c in steady.strip("|").split("|")]
    assert cells[3] == "20" and cells[4] == "20" and cells[6] == "0", steady  # sent, ok, errors

    # 8. make clean with the engine running: it stops the engine first.
    user.run("make", "clean")
    assert not _alive(pid), "make clean left the engine running"
    assert not (clone / "build").exists()
    assert user.http("/v2/health/ready")[0] == 0

    # 9. make deploy from clean, then invoke stop. The dependency wheels come
    # from the user's wheel cache (~/.cache/ai-engine), which make clean keeps.
    print(f"kernels {_seed_kernels(clone)}")
    clean = user.run("make", "deploy").stdout
    assert re.search(r"✓ dependency wheels .*\(from the cache, " + re.escape(str(tmp_path / "home")), clean), clean
    pid = user.pid()
    assert pid and _alive(pid) and user.http("/v2/health/ready")[0] == 200
    stop = user.run(".venv/bin/invoke", "stop").stdout
    assert "stopped" in stop and not _alive(pid)
    assert user.http("/v2/health/ready")[0] == 0
    print(f"user path walked in {time.monotonic() - t_start:.0f} s")
