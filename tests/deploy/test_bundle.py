"""The release bundle: reproducible bytes, a manifest that covers every file,
and a host-side check that refuses a damaged release before changing anything."""

from __future__ import annotations

import dataclasses
import json
import tarfile

import pytest
from packaging.utils import canonicalize_name

from engine.deploy import DeployError
from engine.deploy.bundle import FIXED_MTIME, build_bundle, extract, read_bundle
from engine.deploy.prepare import check_files
from engine.deploy.pipeline import Options, Pipeline
from engine.deploy.report import Reporter
from tests.deploy.conftest import BUILD_ONLY_DISTS, HOST_DISTS, REPO, write_site


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, deploy_build, digits_model, kernels_lib):
    d = tmp_path_factory.mktemp("bundlespec")
    site = write_site(d / "site.yaml", [{"name": "box", "type": "local", "root": str(d / "root")}],
                      listen="127.0.0.1", http_port=18999)
    opts = Options(specs=[REPO / "sysconfig" / "spec.yaml", site], build_dir=deploy_build, lib_dir=kernels_lib)
    return Pipeline(opts, Reporter(quiet=True)).bundle_inputs()[0]


@pytest.fixture(scope="module")
def light(inputs):
    """The same inputs with only the engine wheel and pip: for the tests whose
    subject is the version and the manifest check, not which wheels ride along
    (test_same_inputs_give_the_same_bytes builds the whole bundle)."""
    return dataclasses.replace(inputs, wheels=[w for w in inputs.wheels if w.name.startswith(("ai_engine-", "pip-"))])


def test_same_inputs_give_the_same_bytes(inputs, tmp_path):
    a = build_bundle(inputs, tmp_path / "a")
    b = build_bundle(inputs, tmp_path / "b")
    assert a.sha256 == b.sha256 and a.version == b.version
    assert a.path.name == f"ai-engine-{a.version}-{inputs.arch}.tar.gz"
    with tarfile.open(a.path) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == "MANIFEST.json" and names[1:] == sorted(names[1:])
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(FIXED_MTIME, 0, 0, "", "")}
    raw = a.path.read_bytes()
    assert raw[4:8] == b"\0\0\0\0"  # gzip header mtime
    manifest = read_bundle(a.path).manifest
    assert set(manifest["files"]) == set(names[1:])
    for prefix in ("wheels/ai_engine-", "wheels/numpy-", "wheels/pip-", "lib/libaie_kernels.so",
                   "models/digits.aie", "models/digits.smoke.json", "rootfs/etc/ai-engine/engine.yaml",
                   "engine/deploy/remote.py"):
        assert any(n.startswith(prefix) for n in names), prefix
    # The wheels are what a host runs and nothing else: requirements/host.in's closure.
    wheels = {canonicalize_name(n.removeprefix("wheels/").split("-")[0]) for n in names if n.startswith("wheels/")}
    assert not wheels & BUILD_ONLY_DISTS, sorted(wheels & BUILD_ONLY_DISTS)
    assert {"onnx", "invoke", "fabric", "rich", "setuptools"} <= BUILD_ONLY_DISTS
    assert wheels == HOST_DISTS | {"ai-engine", "pip"}, (sorted(wheels - HOST_DISTS), sorted(HOST_DISTS - wheels))
    dependency_bytes = sum(m.size for m in members if m.name.startswith("wheels/") and "ai_engine-" not in m.name)
    print(f"bundle {a.size / 1e6:.1f} MB; dependency wheels {dependency_bytes / 1e6:.1f} MB "
          f"({len(wheels) - 1} with pip)")


def test_any_changed_input_changes_the_version(light, tmp_path):
    assert len(light.wheels) == 2
    base = build_bundle(light, tmp_path / "a")
    rootfs = dict(light.rootfs)
    content, mode = rootfs["etc/ai-engine/engine.yaml"]
    rootfs["etc/ai-engine/engine.yaml"] = (content + b"# edited\n", mode)
    changed = build_bundle(dataclasses.replace(light, rootfs=rootfs), tmp_path / "b")
    assert changed.version != base.version and changed.sha256 != base.sha256
    named = build_bundle(light, tmp_path / "c", version="v1.2.3")
    assert named.version == "v1.2.3" and named.path.name.startswith("ai-engine-v1.2.3-")


def test_host_refuses_a_damaged_release(light, tmp_path):
    bundle = build_bundle(light, tmp_path / "b")
    release = tmp_path / "release"
    manifest = extract(bundle.path, release)
    check_files(release, manifest)  # intact: passes
    smoke = release / "models" / "digits.smoke.json"
    doc = json.loads(smoke.read_text())
    doc["outputs"][0]["data"][0] += 1.0
    smoke.write_text(json.dumps(doc))
    with pytest.raises(DeployError, match=r"models/digits.smoke.json: bundle file does not match its sha256"):
        check_files(release, manifest)


def test_not_a_bundle_is_one_clear_error(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    with pytest.raises(DeployError, match=r"junk.tar.gz: not a readable ai-engine bundle"):
        read_bundle(junk)
