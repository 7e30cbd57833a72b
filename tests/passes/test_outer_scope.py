"""Values an If/Loop/Scan body reads from the enclosing graph (constants,
initializers, computed values, two levels down) survive every pass: each
model converts, executes and matches onnxruntime. Every pass asks the IR
for a value's readers through engine.ir (node_reads / Graph.consumers),
which counts subgraph reads."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.convert import convert_file
from engine.session import InferenceSession

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr, np.float32)))


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def branch(name, nodes, out, shape):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, shape)])


def cond_nodes(x="x"):
    """c = sum(x) > 0: a data-dependent condition (nothing folds it)."""
    return [helper.make_node("ReduceSum", [x], ["s"], keepdims=0), const("zero", 0.0),
            helper.make_node("Greater", ["s", "zero"], ["c"])]


def model(nodes, inits=(), x_shape=(2, 3), y_shape=(2, 3), extra_outputs=()):
    g = helper.make_graph(nodes, "outer", [helper.make_tensor_value_info("x", F, list(x_shape))],
                          [helper.make_tensor_value_info("y", F, list(y_shape)),
                           *(helper.make_tensor_value_info(o, F, list(s)) for o, s in extra_outputs)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def torch_style_constant():
    """torch.onnx's If: both branches read /Constant_output_0 of the outer graph, nothing else does."""
    then_g = branch("then", [helper.make_node("Mul", ["x", "/Constant_output_0"], ["t"])], "t", [2, 3])
    else_g = branch("else", [helper.make_node("Add", ["x", "/Constant_output_0"], ["e"])], "e", [2, 3])
    return model([const("/Constant_output_0", [2.0]), *cond_nodes(),
                  helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)])


def initializer_shared_with_matmul():
    """W feeds a MatMul (prepacked, laid out for the kernels) and a branch (must see W as given)."""
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    then_g = branch("then", [helper.make_node("MatMul", ["x", "W"], ["t0"]),
                             helper.make_node("Add", ["t0", "W1"], ["t"])], "t", [2, 3])
    else_g = branch("else", [helper.make_node("Sub", ["x", "W1"], ["e"])], "e", [2, 3])
    return model([helper.make_node("MatMul", ["x", "W"], ["m"]), *cond_nodes("m"),
                  helper.make_node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
                  helper.make_node("Add", ["i", "m"], ["y"])],
                 inits=[init("W", w), init("W1", RNG.standard_normal(3))])


def computed_value_inside_fusions():
    """m = x @ W is fused with its bias and Relu in the outer graph, but a
    branch reads m itself: the fusion must keep it."""
    then_g = branch("then", [helper.make_node("Mul", ["m", "m"], ["t"])], "t", [2, 4])
    else_g = branch("else", [helper.make_node("Neg", ["m"], ["e"])], "e", [2, 4])
    return model([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["mb"]),
                  helper.make_node("Relu", ["mb"], ["r"]), *cond_nodes(),
                  helper.make_node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
                  helper.make_node("Add", ["i", "r"], ["y"])],
                 inits=[init("W", RNG.standard_normal((3, 4))), init("b", RNG.standard_normal(4))], y_shape=(2, 4))


def nested_two_levels():
    """An If inside an If branch reads a constant, an initializer and a
    computed value of the outermost graph."""
    inner_then = branch("inner_then", [helper.make_node("Mul", ["r", "/Constant_output_0"], ["it"])], "it", [2, 3])
    inner_else = branch("inner_else", [helper.make_node("Add", ["r", "B"], ["ie"])], "ie", [2, 3])
    then_g = branch("then", [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
                             helper.make_node("Greater", ["mx", "zero"], ["c2"]),
                             helper.make_node("If", ["c2"], ["t"], then_branch=inner_then, else_branch=inner_else)],
                    "t", [2, 3])
    else_g = branch("else", [helper.make_node("Sub", ["r", "/Constant_output_0"], ["e"])], "e", [2, 3])
    return model([const("/Constant_output_0", [3.0]), helper.make_node("Relu", ["x"], ["r"]), *cond_nodes(),
                  helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                 inits=[init("B", RNG.standard_normal(3))])


def loop_reads_outer():
    """A Loop (trip count 3, one carried value) whose body reads an outer constant and a computed value."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "/Constant_output_0"], ["a1"]), helper.make_node("Add", ["a1", "r"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, [2, 3])])
    trip = helper.make_node("Constant", [], ["trip"], value=numpy_helper.from_array(np.array(3, np.int64)))
    true = helper.make_node("Constant", [], ["true"], value=numpy_helper.from_array(np.array(True)))
    return model([const("/Constant_output_0", [0.5]), helper.make_node("Sigmoid", ["x"], ["r"]), trip, true,
                  helper.make_node("Loop", ["trip", "true", "x"], ["y"], body=body)])


def scan_reads_outer():
    """A Scan over the rows of x whose body adds an outer initializer and a computed value."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s1"]), helper.make_node("Mul", ["s1", "K"], ["s2"]),
         helper.make_node("Add", ["s2", "t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["each"])], "body",
        [helper.make_tensor_value_info("s_in", F, [3]), helper.make_tensor_value_info("row", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]), helper.make_tensor_value_info("each", F, [3])])
    return model([helper.make_node("Tanh", ["x"], ["th"]), helper.make_node("ReduceMean", ["th"], ["t"], axes=[0], keepdims=0),
                  helper.make_node("Scan", ["zero3", "x"], ["y", "rows"], body=body, num_scan_inputs=1)],
                 inits=[init("K", [0.9, 1.1, 0.5]), init("zero3", [0.0, 0.0, 0.0])], y_shape=(3,), extra_outputs=[("rows", (2, 3))])


def conv_output_read_by_branch():
    """Conv + BatchNormalization fold and the kernel layout change the outer
    Conv's output, which a branch reads as NCHW."""
    x = helper.make_tensor_value_info("x", F, [1, 2, 5, 5])
    then_g = branch("then", [helper.make_node("Relu", ["conv"], ["t"])], "t", [1, 4, 5, 5])
    else_g = branch("else", [helper.make_node("Neg", ["conv"], ["e"])], "e", [1, 4, 5, 5])
    nodes = [helper.make_node("Conv", ["x", "Wc"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["conv", "g", "b", "mu", "var"], ["bn"]),
             *cond_nodes(), helper.make_node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["i", "bn"], ["y"])]
    inits = [init("Wc", RNG.standard_normal((4, 2, 3, 3))), init("g", RNG.random(4) + 0.5), init("b", RNG.standard_normal(4)),
             init("mu", RNG.standard_normal(4)), init("var", RNG.random(4) + 0.5)]
    g = helper.make_graph(nodes, "outer", [x], [helper.make_tensor_value_info("y", F, [1, 4, 5, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CASES = {f.__name__: f for f in (torch_style_constant, initializer_shared_with_matmul, computed_value_inside_fusions,
                                 nested_two_levels, loop_reads_outer, scan_reads_outer, conv_output_read_by_branch)}


@pytest.mark.parametrize("case", CASES)
def test_outer_scope_values_survive_passes(case, tmp_path):
    m = CASES[case]()
    onnx.checker.check_model(m, full_check=True)
    src = tmp_path / f"{case}.onnx"
    onnx.save(m, src)
    convert_file(src, tmp_path / f"{case}.aie")  # executes once: a lost value fails here
    sess = InferenceSession(tmp_path / f"{case}.aie", threads=1)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    for sign in (1.0, -1.0):  # both branches of a data-dependent If
        x = (sign * (np.abs(RNG.standard_normal(shape)) + 0.1)).astype(np.float32)
        for got, want in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
