"""Conversion proves the model runs: convert_file (behind `ai-engine
convert`, `invoke convert` and the deploy) executes the converted model once
at a representative shape before writing, and the arena it prints and records
is that execution's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine import aie_format
from engine.cli import main
from engine.convert import (REPRESENTATIVE_DIM, PrecisionOptions, convert_file, representative_inputs,
                            representative_shapes)
from engine.errors import ConversionError
from engine.onnx_import import import_file


def pool_model(path, in_shape, kernel=2):
    """x -> MaxPool(kernel) -> Relu: runs at any size >= kernel."""
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[kernel, kernel]), helper.make_node("Relu", ["p"], ["y"])],
        "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_model_that_cannot_run_fails_convert_with_its_error(tmp_path, capsys):
    src = pool_model(tmp_path / "bad.onnx", [1, 1, 2, 2], kernel=3)
    assert main(["convert", str(src), "-o", str(tmp_path / "bad.aie")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ai-engine convert: error: ") and "does not run at x [1, 1, 2, 2]" in err, err
    assert "MaxPool" in err and "3x3" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]  # nothing written, no temp file left


def test_symbolic_dims_planned_at_representative_shape(tmp_path):
    src = pool_model(tmp_path / "sym.onnx", ["N", 3, "H", "W"])
    summary = convert_file(src, tmp_path / "sym.aie")
    d = REPRESENTATIVE_DIM
    [planned] = summary.planned_shapes
    assert planned["inputs"] == {"x": [1, 3, d, d]}
    assert summary.arena_bytes > 0
    text = "\n".join(summary.lines())
    assert f"x [1, 3, {d}, {d}] (symbolic N=1, H={d}, W={d} by default" in text and "(executed once)" in text
    meta = aie_format.load(tmp_path / "sym.aie").meta
    assert meta["planned"][0]["inputs"] == {"x": [1, 3, d, d]}


def test_spec_shapes_choose_the_executed_shape(tmp_path):
    src = pool_model(tmp_path / "sym.onnx", ["N", 3, "H", "W"])
    summary = convert_file(src, tmp_path / "s.aie", precision=PrecisionOptions(shapes={"x": [2, 3, 20, 30]}))
    assert summary.planned_shapes[0]["inputs"] == {"x": [2, 3, 20, 30]}
    with pytest.raises(ConversionError, match=r"shape \[2, 4, 20, 30\] does not fit input 'x' with dims \['N', 3"):
        convert_file(src, tmp_path / "t.aie", precision=PrecisionOptions(shapes={"x": [2, 4, 20, 30]}))
    with pytest.raises(ConversionError, match=r"shapes name inputs \['y'\], the model's inputs are \['x'\]"):
        convert_file(src, tmp_path / "t.aie", precision=PrecisionOptions(shapes={"y": [1]}))
    assert not (tmp_path / "t.aie").exists()


def test_representative_inputs_dtypes_and_determinism(tmp_path):
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "seq"])
    g = helper.make_graph([helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
                           helper.make_node("Add", ["f", "x"], ["y"])], "m", [ids, x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "seq"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    graph = import_file(tmp_path / "m.onnx")
    feeds, how = representative_inputs(graph)
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].shape == (1, REPRESENTATIVE_DIM)
    assert set(np.unique(feeds["ids"])) <= {0, 1}
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (2, REPRESENTATIVE_DIM)
    assert "batch=1" in how and f"seq={REPRESENTATIVE_DIM}" in how
    again, _ = representative_inputs(graph)
    np.testing.assert_array_equal(feeds["x"], again["x"])
    assert representative_shapes(graph, {"ids": [3, 5], "x": [2, 5]})[0] == {"ids": (3, 5), "x": (2, 5)}


def test_sample_is_the_executed_input(tmp_path):
    src = pool_model(tmp_path / "sym.onnx", ["N", 3, "H", "W"])
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((2, 3, 6, 8)).astype(np.float32))
    summary = convert_file(src, tmp_path / "s.aie", precision=PrecisionOptions(sample=tmp_path / "x.npy"))
    [planned] = summary.planned_shapes
    assert planned["inputs"] == {"x": [2, 3, 6, 8]} and "(the first sample)" in planned["how"]
