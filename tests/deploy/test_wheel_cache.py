"""The wheel cache (engine.deploy.wheelcache): a deploy into a fresh build
dir (after `make clean`, another checkout) takes unchanged wheels from it;
a damaged or half-written entry is a miss; a cache that cannot be written
costs only time."""

from __future__ import annotations

import os

import pytest

from engine.deploy import wheelcache
from engine.deploy.pipeline import Options, Pipeline, sha256_file
from engine.deploy.report import Reporter
from tests.deploy.conftest import HTTP_PORT, REPO, recording_reporter, write_site


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AIE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _wheels(d, names=("a-1-py3-none-any.whl", "b-2-py3-none-any.whl")):
    d.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        (d / name).write_bytes(os.urandom(100 + i))
    return sorted(d / n for n in names)


def test_stored_wheels_come_back_byte_for_byte_into_an_emptied_dir(cache, tmp_path):
    built = _wheels(tmp_path / "built")
    wheelcache.store("deps", "k1", built)
    out = tmp_path / "out"
    _wheels(out, ("stale-0-py3-none-any.whl",))
    got = wheelcache.fetch("deps", "k1", out)
    assert [p.name for p in got] == [p.name for p in built]
    assert [p.read_bytes() for p in got] == [p.read_bytes() for p in built]
    assert sorted(out.iterdir()) == got  # the stale wheel is gone
    assert wheelcache.fetch("deps", "k2", tmp_path / "other") is None
    assert wheelcache.fetch("engine", "k1", tmp_path / "other") is None


def test_a_damaged_or_half_written_entry_is_a_miss(cache, tmp_path):
    built = _wheels(tmp_path / "built")
    wheelcache.store("deps", "k1", built)
    entry = cache / "wheels" / "deps-k1"
    victim = entry / built[0].name
    victim.unlink()  # the stored copy is a hard link of built[0]: break it before damaging
    victim.write_bytes(b"damaged")
    assert wheelcache.fetch("deps", "k1", tmp_path / "out") is None
    wheelcache.store("deps", "k1", built)  # replaced by a good entry
    assert wheelcache.fetch("deps", "k1", tmp_path / "out") is not None
    (entry / wheelcache.CONTENTS).unlink()
    assert wheelcache.fetch("deps", "k1", tmp_path / "out2") is None
    assert not (tmp_path / "out2").exists()


def test_only_the_newest_entries_of_a_kind_are_kept(cache, tmp_path):
    built = _wheels(tmp_path / "built")
    for i in range(wheelcache.KEEP + 2):
        wheelcache.store("engine", f"k{i}", built)
        os.utime(cache / "wheels" / f"engine-k{i}", (i, i))  # ordered by use, whatever the clock's resolution
    wheelcache.store("deps", "d", built)
    kept = sorted(p.name for p in (cache / "wheels").iterdir())
    assert kept == ["deps-d", *[f"engine-k{i}" for i in range(2, wheelcache.KEEP + 2)]], kept


def test_off_or_unwritable_costs_only_the_build(tmp_path, monkeypatch):
    built = _wheels(tmp_path / "built")
    monkeypatch.setenv("AIE_CACHE_DIR", "off")
    assert wheelcache.cache_dir() is None
    wheelcache.store("deps", "k", built)
    assert wheelcache.fetch("deps", "k", tmp_path / "out") is None
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AIE_CACHE_DIR", str(blocker))
    wheelcache.store("deps", "k", built)  # no error
    assert wheelcache.fetch("deps", "k", tmp_path / "out") is None
    monkeypatch.delenv("AIE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert wheelcache.cache_dir() == tmp_path / "xdg" / "ai-engine"


def test_a_fresh_build_dir_takes_the_same_wheels_from_the_cache(deploy_build, kernels_lib, digits_model, tmp_path):
    """Once the session's build dir has its wheels (built here if no test built
    them yet), a build dir of its own (as after make clean) gets them from the
    cache without building, byte for byte, and its output says so."""
    site = write_site(tmp_path / "site.yaml", [{"name": "box", "type": "local", "root": str(tmp_path / "root")}],
                      listen="127.0.0.1", http_port=HTTP_PORT)
    specs, so = [REPO / "sysconfig" / "spec.yaml", site], kernels_lib / "libaie_kernels.so"
    first = Pipeline(Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib), Reporter(quiet=True)).wheels(so)
    reporter, output = recording_reporter()
    fresh = Pipeline(Options(specs=specs, build_dir=tmp_path / "build", lib_dir=kernels_lib), reporter).wheels(so)
    assert [(p.name, sha256_file(p)) for p in fresh] == [(p.name, sha256_file(p)) for p in first]
    text = output.getvalue()
    for step in ("dependency wheels", "engine wheel"):
        assert any(step in line and "(from the cache, " in line for line in text.splitlines()), (step, text)


def _tiny_wheel(d) -> "Path":
    """A one-module wheel: pip installs it in a second, unlike the bundle's."""
    import base64
    import hashlib
    import zipfile

    files = {"aietiny.py": b"VALUE = 42\n",
             "aietiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: aietiny\nVersion: 1.0\n",
             "aietiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                     f"{len(b)}\n" for n, b in files.items()) + "aietiny-1.0.dist-info/RECORD,,\n"
    path = d / "aietiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, b in {**files, "aietiny-1.0.dist-info/RECORD": record.encode()}.items():
            z.writestr(n, b)
    return path


def _release(root, wheel_dir):
    """ROOT/opt/ai-engine/releases/v1 holding the wheels and their manifest."""
    import json
    import shutil
    import sys

    from engine.deploy.hostroot import HostRoot

    host = HostRoot(root, say=lambda msg: None)
    release = host.release("v1")
    (release / "wheels").mkdir(parents=True)
    for w in wheel_dir.iterdir():
        shutil.copy2(w, release / "wheels" / w.name)
    files = {f"wheels/{w.name}": sha256_file(w) for w in (release / "wheels").iterdir()}
    (release / "MANIFEST.json").write_text(json.dumps(
        {"version": "v1", "python": "%d.%d" % sys.version_info[:2], "files": files}))
    return host, release


def test_a_new_root_links_the_venv_of_the_same_wheels_from_the_venv_cache(tmp_path):
    import subprocess
    import sys

    from engine.deploy import wheels
    from engine.deploy.prepare import prepare, venv_from_cache

    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    _tiny_wheel(wheel_dir)
    (wheel_dir / wheels.pip_wheel().name).write_bytes(wheels.pip_wheel().read_bytes())
    python, cache = getattr(sys, "_base_executable", sys.executable), tmp_path / "venvs"
    said = []
    host_a, release_a = _release(tmp_path / "a", wheel_dir)
    host_a.say = said.append
    prepare(host_a, release_a, python, cache)
    host_b, release_b = _release(tmp_path / "b", wheel_dir)
    host_b.say = said.append
    prepare(host_b, release_b, python, cache)
    assert said[1] == "building the release venv from the bundled wheels" and said[3].startswith(
        "the release venv from the venv cache"), said
    venv_b = release_b / "venv"
    run = subprocess.run([str(venv_b / "bin" / "python"), "-c", "import aietiny, sys; print(aietiny.VALUE, sys.prefix)"],
                         capture_output=True, text=True)
    assert run.stdout.split() == ["42", str(venv_b.resolve())], run.stdout + run.stderr
    for path in [*(venv_b / "bin").iterdir(), venv_b / "pyvenv.cfg"]:
        if path.is_file() and not path.is_symlink():
            assert str(release_a.resolve()).encode() not in path.read_bytes(), path
    module = "lib/python%d.%d/site-packages/aietiny.py" % sys.version_info[:2]
    assert (venv_b / module).stat().st_ino == (release_a / "venv" / module).stat().st_ino  # linked, not copied

    # An entry without its ORIGIN (half stored) is not used (prepare then builds).
    [entry] = cache.iterdir()
    (entry / "ORIGIN").unlink()
    release_c = tmp_path / "c"
    assert not venv_from_cache(cache, entry.name, release_c) and not (release_c / "venv").exists()
