"""`invoke deploy` end to end: render → build-kernels → convert → wheels →
bundle → (per host) install → (re)start → verify.

Build steps are skipped like make does, but by content: each records the
sha256 of its inputs and outputs in build/deploy/state.json and runs again
only when an input changed or an output is missing or was altered. The host
steps skip themselves: a host whose active release is the bundle's and whose
engine serves is left alone (same pid).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from hostspec.balancer import backends
from hostspec.hugepages import resolve_model_memory
from hostspec.loader import load_spec
from hostspec.render import render_tree

from engine.deploy import DeployError, wheelcache, wheels
from engine.deploy.balancer_host import BalancerHost
from engine.deploy.balancer_rollout import Rollout
from engine.deploy.bundle import REPO_FILES, Bundle, BundleInputs, build_bundle, read_bundle
from engine.deploy.canary import fleet_ramp
from engine.deploy.reload import decide_bundles
from engine.deploy.report import Reporter
from engine.deploy.targets import (HostResult, Settings, Target, guarded, host_key_policy, make_balancer_targets,
                                   make_targets, run_fleet)
from engine.deploy.tokens import auth_summary, hmac_algorithm, no_key_error

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


def dependency_inputs() -> str:
    """What decides the dependency wheels: the requirement files, this Python
    and machine, the bundled pip (the "dependency wheels" step's inputs and
    their cache key)."""
    req = [REPO / wheels.HOST_REQUIREMENTS, REPO / "requirements" / "constraints.txt"]
    return digest(*req, platform.python_version(), platform.machine(), wheels.pip_wheel())


def _versions(*dists: str) -> list[str]:
    out = []
    for dist in dists:
        try:
            out.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{dist} -")
    return out


# Bumped when the layout of a step's entry changes: older entries then read
# as "not cached" and the step runs again instead of being misread.
STATE_FORMAT = 2


class StepState:
    """build/deploy/state.json: per step, the inputs digest and each output by
    role (its path and sha256). Outputs are keyed by role, never by position:
    the file is written with sorted keys, so a list read back would come in
    another order than the step returned it."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def cached(self, step: str, inputs: str) -> dict[str, Path] | None:
        """The step's outputs when its inputs are unchanged and every output is
        still there with the content it had; else None (run the step)."""
        entry = self.data.get("steps", {}).get(step)
        if not entry or entry.get("inputs") != inputs or entry.get("format") != STATE_FORMAT:
            return None
        outputs = {role: Path(o["path"]) for role, o in entry["outputs"].items()}
        if all(p.is_file() and sha256_file(p) == entry["outputs"][role]["sha256"] for role, p in outputs.items()):
            return outputs
        return None

    def record(self, step: str, inputs: str, outputs: dict[str, Path]) -> None:
        self.data.setdefault("steps", {})[step] = {
            "format": STATE_FORMAT, "inputs": inputs,
            "outputs": {role: {"path": str(p), "sha256": sha256_file(p)} for role, p in outputs.items()}}
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
    token: str | None = None       # bearer token for an auth-enabled engine (default: minted from its secret)


class Pipeline:
    def __init__(self, options: Options, reporter: Reporter | None = None):
        self.opts = options
        self.report = reporter or Reporter()
        self.spec = load_spec(options.specs or None)
        self.work = options.build_dir / "deploy"
        self.state = StepState(self.work / "state.json")
        self.settings = Settings.from_spec(self.spec.data["deploy"])
        if options.parallel:
            self.settings.parallel = options.parallel
        self._bundle: Bundle | None = None
        self._from_cache = False  # set by _cached while a step runs: its detail says so

    # ---- build steps ---------------------------------------------------------
    def _step(self, name: str, inputs: str, run: Callable[[], dict[str, Path]]) -> dict[str, Path]:
        """Run a build step unless its inputs and outputs are as last recorded.
        Outputs are {role: path}, so callers pick them by name."""
        with self.report.step(name) as shown:
            outputs = self.state.cached(name, inputs)
            if outputs is not None:
                shown["detail"] = "unchanged, skipped"
                return outputs
            self._from_cache = False
            outputs = run()
            self.state.record(name, inputs, outputs)
            names = [p.name for p in outputs.values()]
            shown["detail"] = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
            if self._from_cache:
                shown["detail"] += f" (from the cache, {wheelcache.cache_dir()})"
            return outputs

    def render(self) -> dict[str, tuple[bytes, int]]:
        with self.report.step("render") as shown:
            # The engine hosts' files: the balancer's are installed apart (provision_balancers).
            tree = render_tree(self.spec, role="engine")
            shown["detail"] = f"{len(tree)} files, spec {self.spec.digest[:12]}"
        return {rel: (f.content, f.mode) for rel, f in sorted(tree.items())}

    def kernels(self) -> dict[str, Path]:
        """{"so": shared library, "a": static archive}."""
        if self.opts.lib_dir is not None:
            libs = {"so": self.opts.lib_dir / "libaie_kernels.so", "a": self.opts.lib_dir / "libaie_kernels.a"}
            missing = [p for p in libs.values() if not p.is_file()]
            if missing:
                raise DeployError("prebuilt kernel library missing", where=str(missing[0]),
                                  hint="build it with `make -C kernels BUILD_DIR=...`")
            return libs
        lib_dir = self.opts.build_dir / "lib"
        libs = {"so": lib_dir / "libaie_kernels.so", "a": lib_dir / "libaie_kernels.a"}
        sources = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "kernels"], cwd=REPO,
                                 capture_output=True, text=True).stdout.split()
        inputs = digest(*[REPO / s for s in sorted(sources) if (REPO / s).is_file()], *sorted(sources),
                        str(self.opts.build_dir.resolve()))

        def build() -> dict[str, Path]:
            jobs = self.opts.jobs or os.cpu_count() or 1
            # `cpu`: the two libraries bundled here (no release ships the CUDA one yet).
            proc = subprocess.run(["make", "-C", str(REPO / "kernels"), f"-j{jobs}", "cpu",
                                   f"BUILD_DIR={self.opts.build_dir.resolve()}"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise DeployError(f"building the kernels failed: {proc.stderr.strip()[-500:]}", where="kernels/",
                                  hint="run `make -C kernels` to see the whole error")
            return libs
        return self._step("build-kernels", inputs, build)

    def models(self, kernels_so: Path) -> dict[str, tuple[Path, Path]]:
        # Here, not at the top: the converter pulls in onnx and the planner
        # (~1-2 s of imports), which `invoke status/stop/logs` never need.
        from engine.convert import convert_file
        from engine.deploy.convert_models import check_buckets, precision_options
        from engine.deploy.reference import write_reference

        out = self.work / "models"
        out.mkdir(parents=True, exist_ok=True)
        converter = sorted(p for pattern in CONVERTER_SOURCES for p in REPO.glob(pattern))
        result = {}
        for model in self.spec.data["engine"]["models"]:
            name, source = model["name"], Path(model["source"])  # absolute: the spec loader resolved it
            if not source.is_file():
                # Never a stand-in: a misspelt path named like a zoo model must
                # not deploy the synthetic zoo model (`make deploy` builds the
                # zoo models the default spec names before it deploys).
                raise DeployError(f"model {name!r}: source file not found", where=str(source),
                                  hint=f"fix engine.models[{name}].source in the spec; for a zoo model run "
                                       f"`invoke zoo --name {name}` (writes build/models/)")
            aie, smoke = out / f"{name}.aie", out / f"{name}.smoke.json"
            # Absolute: the spec loader resolved it against the file that set it (x-path).
            sample = Path(model["sample"]) if model.get("sample") else None
            if sample is not None and not sample.is_file():
                raise DeployError(f"model {name!r}: sample file not found", where=str(sample),
                                  hint=f"fix engine.models[{name}].sample in the spec")
            labels = [sample.with_suffix(".json")] if sample and sample.with_suffix(".json").is_file() else []
            # the smoke input: shapes, else the largest shapes served
            shapes = model.get("shapes") or model.get("max_shapes")
            precision = precision_options(model)
            inputs = digest(source, *([sample] if sample else []), *labels, json.dumps(shapes, sort_keys=True),
                            json.dumps([precision.max_shapes, model.get("buckets")], sort_keys=True),
                            json.dumps([precision.precision, precision.max_rel_err, precision.min_top1_agreement]),
                            kernels_so, *converter)

            def convert(name=name, source=source, aie=aie, smoke=smoke, sample=sample, shapes=shapes,
                        precision=precision, model=model) -> dict[str, Path]:
                os.environ.setdefault("AIE_KERNELS_LIB", str(kernels_so))
                try:
                    convert_file(source, aie, precision=precision)
                    check_buckets(model, aie)
                except Exception as exc:  # noqa: BLE001 - any converter failure stops the deploy with its reason
                    raise DeployError(f"converting model {name!r} failed: {exc}", where=str(source)) from None
                write_reference(name, aie, source, smoke, sample=sample, shapes=shapes)
                return {"aie": aie, "smoke": smoke}
            outputs = self._step(f"convert {name}", inputs, convert)
            result[name] = (outputs["aie"], outputs["smoke"])
        return result

    def wheels(self, kernels_so: Path) -> list[Path]:
        deps_dir, engine_dir = self.work / "wheels" / "deps", self.work / "wheels" / "engine"
        deps_inputs = dependency_inputs()
        deps = self._step("dependency wheels", deps_inputs, lambda: {w.name: w for w in self._cached(
            "deps", deps_inputs, deps_dir, lambda: wheels.dependency_wheels(deps_dir))})
        sources = wheels.source_files()
        engine_inputs = digest(kernels_so, *[REPO / s for s in sources], *[str(s) for s in sources])
        # The cache outlives this build dir: what else shapes the wheel (the stub
        # generator, the build backend, this Python) is part of its key.
        engine_key = digest(engine_inputs, *_versions("grpcio-tools", "protobuf", "setuptools", "wheel"),
                            platform.python_version(), platform.machine())
        engine = self._step("engine wheel", engine_inputs, lambda: {"engine": self._cached(
            "engine", engine_key, engine_dir,
            lambda: [wheels.engine_wheel(engine_dir, kernels_so, self.work / "wheel-staging")])[0]})
        return [engine["engine"], *(deps[name] for name in sorted(deps))]

    def _cached(self, kind: str, key: str, out_dir: Path, build: Callable[[], list[Path]]) -> list[Path]:
        """build()'s wheels, or the same wheels from the cache (engine.deploy.wheelcache)."""
        found = wheelcache.fetch(kind, key, out_dir)
        if found is not None:
            self._from_cache = True
            return found
        built = build()
        wheelcache.store(kind, key, built)
        return built

    def bundle_inputs(self) -> tuple[BundleInputs, str]:
        """Run every build step; the bundle's inputs and a digest over all of them."""
        kernels = self.kernels()
        libs = [kernels["so"], kernels["a"]]
        models = self.models(kernels["so"])
        # After convert: a model's memory: auto (hugepages count auto) is the
        # figure its converted file records (hostspec.hugepages).
        self.spec = resolve_model_memory(self.spec, self.work / "models")
        tree = self.render()
        wheel_files = self.wheels(kernels["so"])
        engine = self.spec.data["engine"]
        inputs = BundleInputs(wheels=wheel_files, libs=libs, models=models, rootfs=tree,
                              spec_files=list(self.spec.sources), spec_digest=self.spec.digest,
                              listen=engine["listen"], http_port=engine["http_port"],
                              auth=auth_summary(engine.get("auth")))
        installer = [REPO / rel for rel in REPO_FILES]
        key = digest(*wheel_files, *libs, *[p for pair in models.values() for p in pair],
                     *[c for c, _ in tree.values()], *[f"{r} {m:o}" for r, (_, m) in tree.items()],
                     *self.spec.sources, self.spec.digest, *installer, self.opts.version or "-",
                     inputs.python, inputs.arch, inputs.listen, inputs.http_port,
                     json.dumps(inputs.auth, sort_keys=True))
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
                pruned = self.prune_bundles(out_dir)
                if pruned:
                    shown["detail"] += f"; pruned {len(pruned)} old bundle(s)"
        return self._bundle

    def prune_bundles(self, out_dir: Path) -> list[Path]:
        """Remove bundles beyond the deploy.keep_bundles newest, never the one
        just built nor one whose release a host runs or ran just before
        (what a rollback or a redeploy of it would need)."""
        hosts = self.state.data.get("hosts", {}).values()
        protected = {v for h in hosts for v in (h.get("active"), h.get("previous")) if v}
        protected.add(self._bundle.version)
        bundles = sorted(out_dir.glob("ai-engine-*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
        removed = []
        for path in bundles[self.settings.keep_bundles:]:
            version = path.name.removeprefix("ai-engine-").removesuffix(f"-{platform.machine()}.tar.gz")
            if version not in protected:
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    # ---- host steps --------------------------------------------------------------
    def targets(self) -> list[Target]:
        host_keys = host_key_policy(self.spec, self.opts.build_dir, say=self.report.host)
        targets = make_targets(self.spec, self.opts.hosts, self.settings, host_keys)
        for target in targets:
            target.token = self.opts.token
        return targets

    def balancers(self) -> list[BalancerHost]:
        """The spec's balancer hosts (none: no balancer)."""
        host_keys = host_key_policy(self.spec, self.opts.build_dir, say=self.report.host)
        socket = self.spec.data["balancer"]["runtime_socket"]
        return [BalancerHost(t, socket, self.settings.health_timeout_s)
                for t in make_balancer_targets(self.spec, self.settings, host_keys)]

    def provision_balancers(self, balancers: list[BalancerHost], check: bool = False) -> list[HostResult]:
        """Install the balancer role's files on each balancer host and start
        or gracefully reload HAProxy there (engine.deploy.balancer_host);
        check: only compare (`in-sync` or `drift` with the diffs)."""
        files = {rel: (f.content, f.mode) for rel, f in render_tree(self.spec, role="balancer").items()}
        results = []
        for b in balancers:
            apply = (lambda t, b=b: b.check(files)) if check else (lambda t, b=b: b.provision(files, self.report.host))
            result = guarded(apply, b.target)
            self.report.host_done(result)
            results.append(result)
        return results

    def rollout(self, balancers: list[BalancerHost]) -> Rollout:
        return Rollout([b.api() for b in balancers], [b.name for b in backends(self.spec.data)],
                       drain_timeout_s=self.spec.data["engine"]["limits"]["drain_timeout_s"],
                       up_timeout_s=self.settings.health_timeout_s, say=self.report.host, reloads=self.reloads)

    def reloads(self, target: Target) -> str | None:
        """Why `target` will apply the new bundle with a reload (the host's
        own decision, engine.deploy.reload, taken here on the same two
        bundles), or None: a restart, or the host's active bundle is not
        among the deployer's (then it is drained, as for any restart)."""
        status = guarded(lambda t: t.operate("status"), target)
        active, new = status.data.get("active"), self.bundle()
        if not status.ok or not active or active == new.version:
            return None
        old = new.path.with_name(new.path.name.replace(new.version, active))
        if not old.is_file():
            return None
        try:
            reload, why = decide_bundles(old, new.path)
        except (OSError, ValueError, KeyError, AttributeError, tarfile.TarError, yaml.YAMLError) as exc:
            self.report.host(target.name, f"cannot compare with release {active} ({exc}): drained as for a restart")
            return None
        return why if reload else None

    def deploy(self) -> list[HostResult]:
        """Engine hosts' results, after the balancer hosts' when the spec has any."""
        # Hosts first: an unknown --host or a spec without hosts is an error
        # before minutes of build steps, not after them.
        targets = self.targets()
        balancers = self.balancers()
        auth = self.spec.data["engine"].get("auth") or {}
        if auth.get("enabled") and not self.opts.token and hmac_algorithm(auth) is None:
            raise no_key_error(auth)  # verification could only fail, after every build step
        bundle = self.bundle()
        settings = dataclasses.replace(self.settings)
        action: Callable[[Target], HostResult] = lambda t: t.install(bundle, self.report.host)
        balanced: list[HostResult] = []
        if balancers:
            balanced = self.provision_balancers(balancers)
            failed = next((r for r in balanced if not r.ok), None)
            if failed is not None:
                # Without the runtime API no host can be drained: restarting
                # one would fail the requests it holds.
                return balanced + [HostResult(t.name, "skipped", reason=f"not started: balancer {failed.name} failed")
                                   for t in targets]
            rollout = self.rollout(balancers)
            settings.parallel, lowered = rollout.parallel(settings.parallel)
            if lowered:
                self.report.note(lowered)
            # The canary (deploy.canary) goes first and alone through the same
            # step (run_fleet), then its traffic-weighted ramp (canary_ramp).
            action = rollout.step(action)
        self.report.note(f"deploying release {bundle.version} to {len(targets)} host(s), "
                         f"{settings.parallel} at a time" + (", each drained on the balancer first" if balancers else ""))
        t0 = time.monotonic()
        ramp = fleet_ramp(self.spec, bundle.manifest, self.report.host, self.work,
                          api=balancers[0].api() if balancers else None)
        results = run_fleet(targets, action, settings, on_done=self.report.host_done, canary_ramp=ramp)
        hosts = self.state.data.setdefault("hosts", {})
        for r in results:
            before = hosts.get(r.name, {})
            # A redeploy of the active release reports itself as "previous":
            # keep the release that really ran before (a rollback needs its bundle).
            previous = r.data.get("previous")
            if previous == r.active:
                previous = before.get("previous")
            hosts[r.name] = {"status": r.status, "active": r.active, "version": r.version, "previous": previous,
                             "at": int(time.time())}
        self.state.data["last_deploy_s"] = round(time.monotonic() - t0, 2)
        self.state.save()
        return balanced + results

    def operate(self, op: str, *args: str) -> list[HostResult]:
        """rollback / stop / status / logs on the targeted hosts (no build)."""
        return run_fleet(self.targets(), lambda t: t.operate(op, *args), self.settings)

    def status(self) -> list[HostResult]:
        """Each engine host's status; behind a balancer also its state and
        weight there (data["balancer"]: {balancer host: [ServerStat]}, one
        `show stat` per balancer)."""
        results = self.operate("status")
        for b in self.balancers():
            try:
                stats = b.api().stats()
            except DeployError as exc:
                self.report.note(f"[red]{b.name}: {exc}[/]")
                continue
            finally:
                b.target.close()
            for r in results:
                r.data.setdefault("balancer", {})[b.name] = [s for s in stats if s.server == r.name]
        return results

    def balanced_host(self, name: str) -> tuple[Rollout, list[BalancerHost]]:
        """The rollout controls for one engine host behind the balancer
        (`invoke drain|undrain`); a clear error for anything else."""
        balancers = self.balancers()
        every = {h["name"]: h for h in self.spec.data["hosts"]}
        behind = [b.name for b in backends(self.spec.data)]
        if not balancers:
            raise DeployError("the spec has no balancer host", where="hosts",
                              hint="give one host role: balancer (README: A fleet behind a load balancer)")
        if name not in every:
            raise DeployError(f"unknown host {name!r}", where="--host", hint=f"engine hosts: {', '.join(behind)}")
        if every[name].get("role", "engine") == "balancer":
            raise DeployError(f"{name!r} is a balancer host; drain and undrain take an engine host",
                              where="--host", hint=f"engine hosts: {', '.join(behind)}")
        if name not in behind:
            raise DeployError(f"{name!r} is not behind the balancer (balancer.engines)", where="--host",
                              hint=f"engine hosts behind it: {', '.join(behind)}")
        return self.rollout(balancers), balancers
