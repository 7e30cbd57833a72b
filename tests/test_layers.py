"""The engine package's layers, checked statically (ast, nothing imported; ~1 s).

A module may import modules of its own component and of any lower layer;
components that share a layer do not import each other (the server and the
deploy pipeline both stand on the runtime, not on one another). An import
inside a function is allowed only where LAZY_IMPORTS names it and says why.
The import graph (every import, top level or not) must have no cycle.
docs/ARCHITECTURE.md ("Layers") shows LAYERS as a table; a test keeps the two
the same. Errors: every exception class derives from EngineError, except the
few NOT_ERRORS, and ARCHITECTURE's "Errors" names each.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "engine"

# Lowest first: (layer, components). A component is a module or a package
# (with everything under it); a module belongs to the longest that names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("engine", "engine.errors", "engine.ir", "engine.units")),
    ("config schema", ("engine.config_schema",)),
    ("config rules", ("engine.config_rules",)),
    ("model files", ("engine.onnx_import", "engine.aie_format")),
    ("shape buckets", ("engine.shape_buckets",)),
    ("kernel bindings", ("engine.kernels",)),
    ("arenas and packing", ("engine.arena", "engine.packing")),
    ("plan runs", ("engine.plan_run",)),
    ("lowering context", ("engine.lowering",)),
    ("plan packing", ("engine.plan_pack",)),
    ("op lowerings", ("engine.ops",)),
    ("plan copies", ("engine.plan_copies",)),
    ("plans", ("engine.plan",)),
    ("segmented plans", ("engine.plan_segments",)),
    ("graph passes", ("engine.passes",)),
    ("runtime", ("engine.session", "engine.runtime")),
    ("quantization", ("engine.quantize",)),
    ("conversion", ("engine.convert",)),
    ("wire protocol", ("engine.wire",)),
    ("serving, client, deploy", ("engine.server", "engine.client", "engine.deploy")),
    ("command line", ("engine.cli", "engine.commands")),
]

# (importing module, imported module) -> why it is imported inside a function.
# Only optional dependencies, the CLI's start-up path and the package root.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    # PEP 562 attribute: the package root stays stdlib-only, because the deploy
    # host side (engine.deploy.remote, run by a bare python3) imports it.
    ("engine", "engine.session"): "engine.InferenceSession without numpy for stdlib-only importers",
    # onnx is the build machine's (requirements/build.in): a host's venv serves .aie files without it.
    ("engine.session", "engine.onnx_import"): "only for a .onnx path; names the missing onnx in one line",
    # Optional at run time, and tools that are not host dependencies.
    ("engine.server.server", "uvloop"): "optional; asyncio's loop otherwise",
    ("engine.server.grpc_stubs", "grpc_tools"): "grpcio-tools generates the stubs at build time, not a runtime dependency",
    ("engine.server.grpc_stubs", "engine.server.grpc_gen.grpc_service_pb2"):
        "generated at build time; load() names the command when missing",
    ("engine.server.grpc_stubs", "engine.server.grpc_gen.grpc_service_pb2_grpc"): "generated at build time",
    ("engine.server.grpc_stubs", "engine.server.grpc_gen.model_config_pb2"): "generated at build time",
    ("engine.deploy.bench", "matplotlib"): "not a dependency; plots only where installed",
    ("engine.deploy.bench", "matplotlib.pyplot"): "not a dependency; plots only where installed",
    # `ai-engine --help` builds every subcommand's parser; each subcommand
    # imports its layer when it runs. Measured on the 2-core VM (loaded, best
    # of 3): `ai-engine --help` 0.16 s this way, 2.0 s with the converter,
    # the server and the kernel bindings imported up front.
    ("engine.commands.convert", "engine.convert"): "CLI start-up",
    ("engine.commands.quantize", "engine.quantize"): "CLI start-up",
    ("engine.commands.isa", "engine.kernels"): "CLI start-up",
    ("engine.commands.isa", "engine.kernels.gemm_lowp"): "CLI start-up",
    ("engine.commands.arena_dump", "engine.arena"): "CLI start-up",
    ("engine.commands.serve", "engine.server.config"): "CLI start-up",
    ("engine.commands.serve", "engine.server.server"): "CLI start-up",
    ("engine.commands.serve", "engine.arena"): "CLI start-up",
    # `invoke status/stop/logs/rollback` import the deploy commands; only a
    # deploy that converts models needs the converter and the runtime
    # (onnx, the planner): measured 4.4 -> 2.3 s of imports (2-core VM, loaded).
    ("engine.deploy.pipeline", "engine.convert"): "deploy commands' start-up",
    ("engine.deploy.pipeline", "engine.deploy.convert_models"): "deploy commands' start-up",
    ("engine.deploy.pipeline", "engine.deploy.reference"): "deploy commands' start-up",
    ("engine.deploy.reference", "engine.convert"): "deploy commands' start-up",
    ("engine.deploy.reference", "engine.session"): "deploy commands' start-up",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def resolve(module: str, path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The modules an import statement loads (a `from pkg import name` names
    the submodule pkg.name when there is one, else pkg itself)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


@functools.cache
def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a file."""
    module = module_name(path)
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((name, child.lineno, in_function) for name in resolve(module, path, child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def component(module: str) -> tuple[int, str] | None:
    best = None
    for level, (_, components) in enumerate(LAYERS):
        for c in components:
            if (module == c or module.startswith(c + ".")) and (best is None or len(c) > len(best[1])):
                best = (level, c)
    return best


def internal(name: str) -> bool:
    return name == "engine" or name.startswith("engine.")


def edges() -> dict[str, set[str]]:
    """module -> engine modules it imports (pending vocab files: top level only)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for name, _, lazy in imports(path):
            if internal(name) and name != module:
                graph[module].add(name)
    return graph


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if component(m) is None], "add these modules to LAYERS"


def test_imports_point_down():
    upward = []
    for module, path in MODULES.items():
        level, own = component(module)
        for name, line, lazy in imports(path):
            if not internal(name) or (lazy and (module, name) in LAZY_IMPORTS):
                continue
            target = component(name)
            assert target is not None, f"{path}:{line}: {name} is not an engine module"
            if target[1] != own and target[0] >= level:
                upward.append(f"{path.relative_to(REPO)}:{line}: {module} ({LAYERS[level][0]}) imports {name} "
                              f"({LAYERS[target[0]][0]})")
    assert not upward, "imports that do not point down the layers:\n" + "\n".join(upward)


def test_no_imports_inside_functions():
    lazy = [f"{path.relative_to(REPO)}:{line}: {name}"
            for module, path in MODULES.items()
            for name, line, inside in imports(path) if inside and (module, name) not in LAZY_IMPORTS]
    assert not lazy, ("imports inside functions (move them to the top, or name an optional dependency in "
                      "LAZY_IMPORTS with the reason):\n" + "\n".join(lazy))


def test_lazy_import_list_is_current():
    used = {(m, name) for m, path in MODULES.items() for name, _, inside in imports(path) if inside}
    assert not set(LAZY_IMPORTS) - used, f"LAZY_IMPORTS entries no file needs: {sorted(set(LAZY_IMPORTS) - used)}"


def test_import_graph_is_acyclic():
    graph = edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_deploy_host_side_is_stdlib_only():
    """What a bare python3 runs on a host (the bundle's INSTALLER_FILES)
    imports only the standard library and itself."""
    tree = ast.parse((ENGINE / "deploy" / "bundle.py").read_text())
    files = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "INSTALLER_FILES")
    shipped = {module_name(REPO / f) for f in files}
    bad = [f"{f}:{line}: {name}" for f in files for name, line, _ in imports(REPO / f)
           if name not in shipped and name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"
           and (module_name(REPO / f), name) not in LAZY_IMPORTS]
    assert not bad, "host-side deploy code imports beyond the stdlib and the shipped files:\n" + "\n".join(bad)


def test_architecture_table_matches():
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| layer")]
    documented = [(cells[1].strip(), tuple(re.findall(r"`([\w.]+)`", cells[2])))
                  for cells in (r.split("|") for r in rows)]
    assert documented == [(name, comps) for name, comps in reversed(LAYERS)], \
        "docs/ARCHITECTURE.md's Layers table (top layer first) differs from LAYERS"


def test_server_uses_the_session_interface():
    """engine.server reaches the runtime through InferenceSession and
    engine.runtime only, never the kernel library or the plan's C structs."""
    allowed = {"engine", "engine.errors", "engine.arena", "engine.session", "engine.runtime", "engine.wire",
               "engine.units", "engine.config_schema", "engine.config_rules",  # engine.yaml's one contract
               "engine.shape_buckets"}  # the rules a model's buckets key is held to, everywhere
    reached = {f"{path.relative_to(REPO)}:{line}: {name}" for module, path in MODULES.items()
               if module.startswith("engine.server") for name, line, _ in imports(path)
               if internal(name) and not name.startswith("engine.server") and name not in allowed}
    assert not reached, "engine.server imports below the session interface:\n" + "\n".join(sorted(reached))


# Exception classes that are not errors a user is told about, so not EngineErrors.
NOT_ERRORS = {
    "UnitError": "a ValueError every caller re-words as its own layer's error, with the key's location",
    "NeedsValue": "lowering asks the session for a constant's value",
    "RunsOnHost": "the planner asks plan_segments to run an If/Loop node on the host",
    "ClientGone": "an HTTP peer left: the connection closes quietly",
}


def exception_classes() -> dict[str, list[str]]:
    """{class name: base names} for every exception class of engine/ and
    sysconfig/hostspec/ (bases by their last dotted part)."""
    bases: dict[str, list[str]] = {}
    for path in [*ENGINE.rglob("*.py"), *(REPO / "sysconfig" / "hostspec").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]

    @functools.cache
    def ancestors(name: str) -> frozenset[str]:
        return frozenset({name}).union(*(ancestors(b) for b in bases.get(name, ()) if b != name))

    def builtin_exception(name: str) -> bool:
        value = getattr(builtins, name, None)
        return isinstance(value, type) and issubclass(value, BaseException)

    return {n: sorted(ancestors(n) - {n}) for n in bases if any(map(builtin_exception, ancestors(n)))}


def test_one_error_base_per_layer():
    """Every error derives from EngineError (one line: where, what, hint),
    and docs/ARCHITECTURE.md's "Errors" names each class and why it exists."""
    classes = exception_classes()
    outside = sorted(n for n, up in classes.items() if "EngineError" not in up and n != "EngineError")
    assert outside == sorted(NOT_ERRORS), f"exception classes outside EngineError: {outside}"
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    bullet = text.split("- **Errors.**", 1)[1].split("\n- **", 1)[0]
    undocumented = sorted(n for n in classes if f"`{n}`" not in bullet)
    assert not undocumented, f"docs/ARCHITECTURE.md's Errors bullet does not name: {undocumented}"
