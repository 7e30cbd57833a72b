"""hugepages count auto with a model's `memory: auto`: the figure the
converter recorded for the model's max_shapes, read from the converted
file when rendering (hostspec.hugepages.resolve_model_memory)."""

from __future__ import annotations

import io

import pytest

from hostspec.cli_render import run_render
from hostspec.errors import SpecError
from hostspec.hugepages import hugepage_plan, resolve_model_memory
from hostspec.loader import load_spec
from engine.convert import PrecisionOptions, convert_file
from engine.units import format_size
from hostspec.__main__ import main as hostspec_main
from spec_support import in_tmp, write  # noqa: F401 (in_tmp is a fixture)

PAGE = 2 << 20
ARENA = 8 << 20
MAX_SHAPES = {"input": [256, 784]}  # the zoo's mlp: input [N, 784], N symbolic

SPEC = """
    version: 1
    host:
      hugepages: {{count: auto, headroom: 0%}}
    engine:
      arena: {{size: 8M}}
      models:
        - {{name: mlp, source: mlp.onnx, max_shapes: {{input: [256, 784]}}, memory: {memory}}}
    """


@pytest.fixture(scope="module")
def converted(zoo, tmp_path_factory):
    """The zoo's mlp converted with max_shapes, as `invoke convert` writes it."""
    out = tmp_path_factory.mktemp("models")
    summary = convert_file(zoo("mlp"), out / "mlp.aie", precision=PrecisionOptions(max_shapes=MAX_SHAPES))
    return out, summary


def test_auto_memory_counts_weights_and_the_max_shapes_arena_peak(in_tmp, converted):
    models, summary = converted
    at_max = [p for p in summary.planned_shapes if p["inputs"] == MAX_SHAPES]
    # the max_shapes plan is the converter's peak, well above the batch-1 one it executed
    assert [p["arena_bytes"] for p in at_max] == [summary.arena_bytes]
    assert summary.arena_bytes > 10 * min(p["arena_bytes"] for p in summary.planned_shapes)
    spec = resolve_model_memory(load_spec([write(in_tmp, "spec.yaml", SPEC.format(memory="auto"))]), models)
    plan = hugepage_plan(spec)
    need = ARENA + summary.planned_memory  # arena + weights + arena peak at max_shapes
    assert summary.planned_memory == summary.weights_bytes + summary.arena_bytes
    assert (plan.count, plan.need_pages) == (-(-need // PAGE), -(-need // PAGE))
    assert plan.reason.startswith(f"auto: arena 8M + mlp {format_size(summary.planned_memory)} (converted) = ")
    # the same spec with the figure written by hand renders the same count
    fixed = load_spec([write(in_tmp, "fixed.yaml", SPEC.format(memory=summary.planned_memory))])
    assert hugepage_plan(fixed).count == plan.count


def test_auto_memory_without_the_converted_model_is_one_line_saying_what_to_run(in_tmp, tmp_path):
    spec = load_spec([write(in_tmp, "spec.yaml", SPEC.format(memory="auto"))])
    with pytest.raises(SpecError) as unresolved:
        hugepage_plan(spec)
    assert str(unresolved.value) == (
        "spec.yaml:7: engine.models[0].memory: auto is the converted model's planned memory, and no converted model "
        "was given (run `invoke convert --out build/models`, then render with `--models build/models` "
        "(deploy converts first and does this itself))")
    with pytest.raises(SpecError) as missing:
        resolve_model_memory(spec, tmp_path / "none")
    assert len(missing.value.problems) == 1
    assert f"auto needs the converted model {tmp_path / 'none' / 'mlp.aie'}, which does not exist" in str(missing.value)
    # an arena without hugepages counts no model memory: nothing to read
    off = load_spec([write(in_tmp, "off.yaml", SPEC.format(memory="auto").replace("{size: 8M}",
                                                                                   "{size: 8M, hugepages: false}"))])
    assert resolve_model_memory(off, None) is off and hugepage_plan(off).count == 0
    err = io.StringIO()
    assert run_render(["spec.yaml"], in_tmp / "out", stdout=io.StringIO(), stderr=err) == 1
    assert err.getvalue().splitlines()[-1] == "render: 1 problem(s) in the spec; nothing written"
    assert not (in_tmp / "out").exists()


def test_render_and_check_mode_report_the_converted_figure(in_tmp, converted, capsys):
    models, summary = converted
    need = ARENA + summary.planned_memory
    pages = -(-need // PAGE)
    out = io.StringIO()
    write(in_tmp, "spec.yaml", SPEC.format(memory="auto"))
    assert run_render(["spec.yaml"], in_tmp / "tree", models_dir=models, stdout=out, stderr=io.StringIO()) == 0
    assert f"hugepages: auto: arena 8M + mlp {format_size(summary.planned_memory)} (converted)" in out.getvalue()
    assert f"vm.nr_hugepages = {pages}\n" in (in_tmp / "tree/etc/sysctl.d/90-ai-engine.conf").read_text()
    # a host provisioned with a hand-written figure of 0 bytes drifts from the converted one
    write(in_tmp, "old.yaml", SPEC.format(memory=0))
    base = ["provision", "--root", str(in_tmp / "root"), "--role", "engine", "--no-live"]
    assert hostspec_main([*base, "--spec", "old.yaml"]) == 0
    capsys.readouterr()
    assert hostspec_main([*base, "--spec", "spec.yaml", "--models", str(models), "--check"]) == 2
    check = capsys.readouterr().out
    assert f"+vm.nr_hugepages = {pages}" in check
    assert f"-vm.nr_hugepages = {-(-ARENA // PAGE)}" in check
    # without --models the check stops at the spec, in one line
    assert hostspec_main([*base, "--spec", "spec.yaml", "--check"]) == 1
    bare = capsys.readouterr()
    assert bare.out == "" and len(bare.err.splitlines()) == 1 and "engine.models[0].memory: auto" in bare.err
