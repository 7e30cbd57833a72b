"""`invoke deploy` end to end: render → build-kernels → convert → wheels →
bundle → (per host) install → (re)start → verify.

Build steps are skipped like make does, but by content: each records the
sha256 of its inputs and outputs in build/deploy/state.json and runs again
only when an input changed or an output is missing or was altered. The host
steps skip themselves: a host whose active release is the bundle's and whose
engine serves is left alone (same pid).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.deploy import DeployError
from engine.deploy.bundle import INSTALLER_FILES, Bundle, BundleInputs, build_bundle, read_bundle
from engine.deploy.report import Reporter
from engine.deploy.targets import HostResult, Settings, Target, host_key_policy, make_targets, run_fleet

REPO = Path(__file__).resolve().parents[2]
# Sources that decide what the converter writes and what the reference run
# computes (the server and the deploy code do not).
CONVERTER_SOURCES = ("engine/*.py", "engine/ops/*.py", "engine/passes/*.py", "engine/kernels/*.py")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def digest(*parts: object) -> str:
    """One hash over strings, bytes and files (by content, with their names)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            h.update(f"file {part.name}\0".encode() + bytes.fromhex(sha256_file(part)))
        elif isinstance(part, bytes):
            h.update(b"bytes\0" + hashlib.sha256(part).digest())
        else:
            h.update(f"str {part}\0".encode())
    return h.hexdigest()


class StepState:
    """build/deploy/state.json: per step, the inputs digest and the sha256 of each output."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def cached(self, step: str, inputs: str) -> list[Path] | None:
        """The step's outputs when its inputs are unchanged and every output is
        still there with the content it had; else None (run the step)."""
        entry = self.data.get("steps", {}).get(step)
        if not entry or entry["inputs"] != inputs:
            return None
        outputs = [Path(p) for p in entry["outputs"]]
        if all(p.is_file() and sha256_file(p) == entry["outputs"][str(p)] for p in outputs):
            return outputs
        return None

    def record(self, step: str, inputs: str, outputs: list[Path]) -> None:
        self.data.setdefault("steps", {})[step] = {"inputs": inputs,
                                                   "outputs": {str(p): sha256_file(p) for p in outputs}}
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


@dataclass
class Options:
    specs: list[Path] = field(default_factory=list)   # empty: the embedded default spec
    hosts: list[str] = field(default_factory=list)    # empty: every host of the spec
    parallel: int | None = None                       # overrides deploy.parallel
    version: str | None = None                        # default: content hash
    build_dir: Path = REPO / "build"
    lib_dir: Path | None = None    # prebuilt kernels (skips build-kernels); default: build them into build/lib
    jobs: int = 0
    bundle: Path | None = None     # deploy this prebuilt bundle (skips every build step)


class Pipeline:
    def __init__(self, options: Options, reporter: Reporter | None = None):
        from hostspec.loader import load_spec

        self.opts = options
        self.report = reporter or Reporter()
        self.spec = load_spec(options.specs or None)
        self.work = options.build_dir / "deploy"
        self.state = StepState(self.work / "state.json")
        self.settings = Settings.from_spec(self.spec.data["deploy"])
        if options.parallel:
            self.settings.parallel = options.parallel
        self._bundle: Bundle | None = None

    # ---- build steps ---------------------------------------------------------
    def _step(self, name: str, inputs: str, run: Callable[[], list[Path]]) -> list[Path]:
        """Run a build step unless its inputs and outputs are as last recorded."""
        with self.report.step(name) as shown:
            outputs = self.state.cached(name, inputs)
            if outputs is not None:
                shown["detail"] = "unchanged, skipped"
                return outputs
            outputs = run()
            self.state.record(name, inputs, outputs)
            shown["detail"] = ", ".join(p.name for p in outputs[:3]) + (" …" if len(outputs) > 3 else "")
            return outputs

    def render(self) -> dict[str, tuple[bytes, int]]:
        from hostspec.render import render_tree

        with self.report.step("render") as shown:
            tree = render_tree(self.spec)
            shown["detail"] = f"{len(tree)} files, spec {self.spec.digest[:12]}"
        return {rel: (f.content, f.mode) for rel, f in sorted(tree.items())}

    def kernels(self) -> list[Path]:
        if self.opts.lib_dir is not None:
            libs = [self.opts.lib_dir / "libaie_kernels.so", self.opts.lib_dir / "libaie_kernels.a"]
            missing = [p for p in libs if not p.is_file()]
            if missing:
                raise DeployError("prebuilt kernel library missing", where=str(missing[0]),
                                  hint="build it with `make -C kernels BUILD_DIR=...`")
            return libs
        lib_dir = self.opts.build_dir / "lib"
        libs = [lib_dir / "libaie_kernels.so", lib_dir / "libaie_kernels.a"]
        sources = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "kernels"], cwd=REPO,
                                 capture_output=True, text=True).stdout.split()
        inputs = digest(*[REPO / s for s in sorted(sources) if (REPO / s).is_file()], *sorted(sources),
                        str(self.opts.build_dir.resolve()))

        def build() -> list[Path]:
            jobs = self.opts.jobs or os.cpu_count() or 1
            proc = subprocess.run(["make", "-C", str(REPO / "kernels"), f"-j{jobs}",
                                   f"BUILD_DIR={self.opts.build_dir.resolve()}"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise DeployError(f"building the kernels failed: {proc.stderr.strip()[-500:]}", where="kernels/",
                                  hint="run `make -C kernels` to see the whole error")
            return libs
        return self._step("build-kernels", inputs, build)

    def models(self, kernels_so: Path) -> dict[str, tuple[Path, Path]]:
        from engine.deploy.reference import write_reference

        out = self.work / "models"
        out.mkdir(parents=True, exist_ok=True)
        converter = sorted(p for pattern in CONVERTER_SOURCES for p in REPO.glob(pattern))
        result = {}
        for model in self.spec.data["engine"]["models"]:
            name, source = model["name"], Path(model["source"])  # absolute: the spec loader resolved it
            if not source.is_file():
                self._generate(name, source)
            aie, smoke = out / f"{name}.aie", out / f"{name}.smoke.json"
            samples = [p for p in (source.with_name(f"{name}.sample.npy"), source.with_name(f"{name}.sample.json"))
                       if p.is_file()]
            inputs = digest(source, *samples, kernels_so, *converter)

            def convert(name=name, source=source, aie=aie, smoke=smoke) -> list[Path]:
                from engine.convert import convert_file

                os.environ.setdefault("AIE_KERNELS_LIB", str(kernels_so))
                try:
                    convert_file(source, aie)
                except Exception as exc:  # noqa: BLE001 - any converter failure stops the deploy with its reason
                    raise DeployError(f"converting model {name!r} failed: {exc}", where=str(source)) from None
                write_reference(name, aie, source, smoke)
                return [aie, smoke]
            aie, smoke = self._step(f"convert {name}", inputs, convert)
            result[name] = (aie, smoke)
        return result

    def _generate(self, name: str, source: Path) -> None:
        """A model the spec names but that does not exist yet: build it when the zoo knows it."""
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))  # models/ is a folder at the repo root, not an installed package
        from models import zoo

        if name not in zoo.NAMES or source.suffix != ".onnx":
            raise DeployError("model source not found", where=str(source),
                              hint=f"fix engine.models[{name}].source in the spec")
        with self.report.step(f"generate {name}") as shown:
            built = zoo.ensure(name, source.parent)
            shown["detail"] = str(built.relative_to(REPO) if built.is_relative_to(REPO) else built)

    def wheels(self, kernels_so: Path) -> list[Path]:
        from engine.deploy import wheels

        deps_dir, engine_dir = self.work / "wheels" / "deps", self.work / "wheels" / "engine"
        req = [REPO / "requirements" / "base.in", REPO / "requirements" / "constraints.txt"]
        deps_inputs = digest(*req, platform.python_version(), platform.machine(), wheels.pip_wheel())
        deps = self._step("dependency wheels", deps_inputs, lambda: wheels.dependency_wheels(deps_dir))
        sources = wheels.source_files()
        engine_inputs = digest(kernels_so, *[REPO / s for s in sources], *[str(s) for s in sources])
        engine = self._step("engine wheel", engine_inputs,
                            lambda: [wheels.engine_wheel(engine_dir, kernels_so, self.work / "wheel-staging")])
        return [*engine, *deps]

    def bundle_inputs(self) -> tuple[BundleInputs, str]:
        """Run every build step; the bundle's inputs and a digest over all of them."""
        tree = self.render()
        libs = self.kernels()
        models = self.models(libs[0])
        wheel_files = self.wheels(libs[0])
        engine = self.spec.data["engine"]
        inputs = BundleInputs(wheels=wheel_files, libs=libs, models=models, rootfs=tree,
                              spec_files=list(self.spec.sources), spec_digest=self.spec.digest,
                              listen=engine["listen"], http_port=engine["http_port"])
        installer = [REPO / rel for rel in INSTALLER_FILES]
        key = digest(*wheel_files, *libs, *[p for pair in models.values() for p in pair],
                     *[c for c, _ in tree.values()], *[f"{r} {m:o}" for r, (_, m) in tree.items()],
                     *self.spec.sources, self.spec.digest, *installer, self.opts.version or "-",
                     inputs.python, inputs.arch, inputs.listen, inputs.http_port)
        return inputs, key

    def bundle(self) -> Bundle:
        """Every build step, then the bundle (built only when an input changed)."""
        if self._bundle is not None:
            return self._bundle
        if self.opts.bundle is not None:
            self._bundle = read_bundle(self.opts.bundle)
            self.report.note(f"using prebuilt bundle {self._bundle.path.name} (release {self._bundle.version})")
            return self._bundle
        inputs, key = self.bundle_inputs()
        out_dir = self.opts.build_dir / "bundles"
        previous = self.state.data.get("bundle", {})
        path = Path(previous.get("path", out_dir / "missing"))
        with self.report.step("bundle") as shown:
            if previous.get("key") == key and path.is_file() and sha256_file(path) == previous.get("sha256"):
                self._bundle = Bundle(path, previous["version"], previous["sha256"], path.stat().st_size,
                                      json.loads(previous["manifest"]))
                shown["detail"] = f"unchanged, skipped ({path.name})"
            else:
                self._bundle = build_bundle(inputs, out_dir, self.opts.version)
                self.state.data["bundle"] = {"key": key, "path": str(self._bundle.path), "version": self._bundle.version,
                                             "sha256": self._bundle.sha256,
                                             "manifest": json.dumps(self._bundle.manifest, sort_keys=True)}
                self.state.save()
                shown["detail"] = f"{self._bundle.path.name}, {self._bundle.size / 1e6:.1f} MB"
        return self._bundle

    # ---- host steps --------------------------------------------------------------
    def targets(self) -> list[Target]:
        host_keys = host_key_policy(self.spec, self.opts.build_dir, say=self.report.host)
        return make_targets(self.spec, self.opts.hosts, self.settings, host_keys)

    def deploy(self) -> list[HostResult]:
        bundle = self.bundle()
        targets = self.targets()
        self.report.note(f"deploying release {bundle.version} to {len(targets)} host(s), "
                         f"{self.settings.parallel} at a time")
        t0 = time.monotonic()
        results = run_fleet(targets, lambda t: t.install(bundle, self.report.host), self.settings,
                            on_done=self.report.host_done)
        self.state.data.setdefault("hosts", {}).update(
            {r.name: {"status": r.status, "active": r.active, "version": r.version, "at": int(time.time())}
             for r in results})
        self.state.data["last_deploy_s"] = round(time.monotonic() - t0, 2)
        self.state.save()
        return results

    def operate(self, op: str, *args: str) -> list[HostResult]:
        """rollback / stop / status / logs on the targeted hosts (no build)."""
        return run_fleet(self.targets(), lambda t: t.operate(op, *args), self.settings)
