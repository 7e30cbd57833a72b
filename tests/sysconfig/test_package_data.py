"""hostspec carries its schema, default spec and templates as package data
(issue 11 item 4): the engine wheel deploy builds, installed offline (pip
--no-index from a wheelhouse of the pinned dependencies) into a clean venv
outside the checkout, renders and provisions from there, cwd outside too.
About 35 s on a loaded 2-core host, most of it building the two wheels' worth
of packages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from engine.deploy.wheels import engine_wheel

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "sysconfig" / "hostspec" / "data"


def test_package_data_links_mirror_the_files_to_edit():
    """hostspec/data links to sysconfig/schema.json, sysconfig/spec.yaml and every
    template; a template added without its link would be missing from the wheel."""
    templates = {p.relative_to(REPO / "templates") for p in (REPO / "templates").rglob("*") if p.is_file()}
    links = {p.relative_to(DATA / "templates") for p in (DATA / "templates").rglob("*") if not p.is_dir()}
    missing = sorted(templates - links)
    assert not missing, "templates without a link in hostspec/data/templates: " + ", ".join(
        f"ln -s {os.path.relpath(REPO / 'templates' / m, (DATA / 'templates' / m).parent)} "
        f"sysconfig/hostspec/data/templates/{m}" for m in missing)
    assert links == templates
    for rel in links:
        assert (DATA / "templates" / rel).resolve() == REPO / "templates" / rel, rel
    assert (DATA / "schema.json").resolve() == REPO / "sysconfig" / "schema.json"
    assert (DATA / "spec.yaml").resolve() == REPO / "sysconfig" / "spec.yaml"


RENDER_AND_PROVISION = textwrap.dedent("""
    import sys
    from pathlib import Path
    import hostspec
    from hostspec.cli_render import run_render
    from hostspec.__main__ import main
    print("hostspec from", hostspec.__file__)
    out = Path(sys.argv[1])
    assert run_render(None, out / "default-rootfs") == 0
    assert run_render([out / "site.yaml"], out / "rootfs") == 0
    sys.exit(main(["provision", "--spec", str(out / "site.yaml"), "--root", str(out / "root"), "--no-live"]))
""")


# What hostspec imports at run time besides the engine wheel (engine.errors,
# engine.units, engine.config_schema): the rest of the engine's dependencies
# (numpy, onnx, ...) would make the install slow and prove nothing here.
HOSTSPEC_DEPS = ("jinja2", "pyyaml", "jsonschema")


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)


def test_the_wheel_alone_renders_and_provisions(tmp_path):
    kernels = tmp_path / "libaie_kernels.so"
    kernels.write_bytes(b"not loaded: render and provision never touch the kernels")
    wheel = engine_wheel(tmp_path / "wheel", kernels, tmp_path / "staging")
    # The gRPC stubs are generated into the wheel (git ignores them in the checkout).
    assert "engine/server/grpc_gen/grpc_service_pb2.py" in zipfile.ZipFile(wheel).namelist()
    # The pinned dependencies as wheels, from pip's configured sources (a
    # mirror, the cache), as engine.deploy.wheels gathers them for a bundle.
    wheelhouse = tmp_path / "wheelhouse"
    got = _pip("wheel", "--quiet", "--wheel-dir", str(wheelhouse), "-c", str(REPO / "requirements/constraints.txt"),
               *HOSTSPEC_DEPS)
    if got.returncode != 0:
        pytest.skip(f"no wheels for {', '.join(HOSTSPEC_DEPS)} from pip's sources: {got.stderr.strip()[-300:]}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    for args in (["-c", str(REPO / "requirements/constraints.txt"), *HOSTSPEC_DEPS], ["--no-deps", str(wheel)]):
        got = _pip("--python", str(py), "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), *args)
        assert got.returncode == 0, got.stderr
    venv_site = next((venv / "lib").glob("python3*/site-packages"))

    work = tmp_path / "work"  # cwd and spec outside the checkout
    work.mkdir()
    (work / "site.yaml").write_text("version: 1\nhost:\n  sysctl: {vm.swappiness: 5}\n")
    (work / "run.py").write_text(RENDER_AND_PROVISION)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    proc = subprocess.run([str(py), "-I", "run.py", str(work)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"hostspec from {venv_site}/hostspec/__init__.py" in proc.stdout

    for rel in ("etc/sysctl.d/90-ai-engine.conf", "etc/systemd/system/ai-engine.service",
                "etc/ai-engine/engine.yaml", "etc/default/grub.d/90-ai-engine.cfg", "opt/ai-engine/libexec/check-host"):
        assert (work / "default-rootfs" / rel).is_file(), rel
        assert (work / "root" / rel).read_bytes() == (work / "rootfs" / rel).read_bytes(), rel
    assert "vm.swappiness = 5" in (work / "root" / "etc/sysctl.d/90-ai-engine.conf").read_text()
    # what the package reads is in the wheel as files (not links), byte for byte the checkout's
    shipped = {"hostspec/data/spec.yaml": "sysconfig/spec.yaml", "hostspec/data/schema.json": "sysconfig/schema.json",
               "engine/config.schema.json": "engine/config.schema.json",
               **{f"hostspec/data/templates/{t.relative_to(REPO / 'templates')}": str(t.relative_to(REPO))
                  for t in (REPO / "templates").rglob("*.j2")}}
    for installed, source in shipped.items():
        assert not (venv_site / installed).is_symlink(), installed
        assert (venv_site / installed).read_bytes() == (REPO / source).read_bytes(), installed
