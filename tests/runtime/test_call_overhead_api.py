"""The per-call fast path of InferenceSession: run(out=...), IOBinding, the
last-plan memo against the LRU, and concurrent runs through the prepared
pointer slots. Each compared with onnxruntime on the same file."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.errors import InvalidArgument
from engine.session import InferenceSession


def two_output_model(path):
    """y = x @ W + b (symbolic batch), z = relu(y), k a constant output."""
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [7, 5], rng.standard_normal(35).astype(np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [5], rng.standard_normal(5).astype(np.float32).tolist())
    k = helper.make_tensor("kv", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"]),
         helper.make_node("Relu", ["y"], ["z"]), helper.make_node("Identity", ["kv"], ["k"])],
        "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [3])], [w, b, k])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = two_output_model(tmp_path_factory.mktemp("call") / "two.onnx")
    return InferenceSession(path, threads=1), ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def x_of(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 7)).astype(np.float32)


def test_run_out_writes_into_caller_arrays(model):
    sess, ref = model
    x = x_of(3)
    out = [np.empty((3, 5), np.float32), np.empty((3, 5), np.float32), np.zeros(3, np.float32)]
    got = sess.run(None, {"x": x}, out=out)
    assert all(g is o for g, o in zip(got, out))
    for g, r in zip(got, ref.run(None, {"x": x})):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    # a subset of outputs, in another order
    z, y = np.empty((3, 5), np.float32), np.empty((3, 5), np.float32)
    sess.run(["z", "y"], {"x": x}, out=[z, y])
    np.testing.assert_allclose(z, np.maximum(y, 0))


@pytest.mark.parametrize("bad, said", [
    ([np.empty((3, 5), np.float64)] * 3, "tensor(double) [3, 5], expected a writable C-contiguous tensor(float) array of shape [3, 5]"),
    ([np.empty((5, 3), np.float32).T] * 3, "non-contiguous"),
    ([np.empty((3, 5), np.float32)], "out must be a list of 3 arrays"),
    (np.empty((3, 5), np.float32), "out must be a list of 3 arrays (one per requested output), got ndarray"),
])
def test_run_out_rejects_wrong_arrays(model, bad, said):
    sess, _ = model
    with pytest.raises(InvalidArgument) as e:
        sess.run(None, {"x": x_of(3)}, out=bad)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_io_binding_runs_in_place(model):
    sess, ref = model
    x = x_of(2)
    b = sess.io_binding()
    b.bind_cpu_input("x", x)
    z = np.empty((2, 5), np.float32)
    b.bind_output("z", z)
    b.bind_output("k")
    for seed in range(3):  # the caller refills the bound input in place
        x[...] = x_of(2, seed)
        sess.run_with_iobinding(b)
        got_z, got_k = b.get_outputs()
        assert got_z is z
        want = ref.run(["z", "k"], {"x": x})
        np.testing.assert_allclose(z, want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got_k, want[1])


def test_io_binding_errors_are_one_line(model):
    sess, _ = model
    b = sess.io_binding()
    with pytest.raises(InvalidArgument, match="unknown output name 'nope'"):
        b.bind_output("nope")
    with pytest.raises(InvalidArgument, match="must be a C-contiguous numpy array"):
        b.bind_cpu_input("x", x_of(4)[::2])
    b.bind_cpu_input("x", x_of(2).astype(np.float64))
    b.bind_output("y")
    with pytest.raises(InvalidArgument, match=r"has dtype tensor\(double\), expected tensor\(float\)"):
        sess.run_with_iobinding(b)
    b.bind_cpu_input("x", x_of(2))
    b.bind_output("y", np.empty((3, 5), np.float32))
    with pytest.raises(InvalidArgument, match=r"out array for output .y. is tensor\(float\) \[3, 5\]"):
        sess.run_with_iobinding(b)


def test_last_plan_memo_keeps_lru_order(tmp_path):
    """Runs served from the memo still count as uses: with a cache of 2, the
    shape used most recently survives a third shape."""
    sess = InferenceSession(two_output_model(tmp_path / "m.onnx"), threads=1, plan_cache_size=2)
    sess.run(None, {"x": x_of(1)})
    sess.run(None, {"x": x_of(2)})
    for _ in range(3):
        sess.run(None, {"x": x_of(1)})  # memo hits
    sess.run(None, {"x": x_of(3)})  # evicts the plan for 2 rows, not the one for 1
    keys = [p.label for p in sess.plans()]
    assert keys == ["model 'm', x [1, 7]", "model 'm', x [3, 7]"], keys


def test_concurrent_runs_use_their_own_slots(model):
    """Threads running one plan at once (the GIL released in C) each fill
    their own pointer arrays: every result matches its own input."""
    sess, ref = model
    errors, done = [], threading.Barrier(4)

    def worker(seed):
        try:
            done.wait(timeout=30)
            for i in range(200):
                x = x_of(4, seed * 1000 + i)
                y = sess.run(["y"], {"x": x})[0]
                np.testing.assert_allclose(y, ref.run(["y"], {"x": x})[0], rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in threads)


def test_read_only_and_empty_inputs(model):
    """Read-only arrays (np.frombuffer of a request body) and zero-row
    batches take the address through numpy instead of the buffer protocol."""
    sess, ref = model
    x = x_of(2)
    ro = np.frombuffer(x.tobytes(), np.float32).reshape(2, 7)
    np.testing.assert_allclose(sess.run(["y"], {"x": ro})[0], ref.run(["y"], {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert sess.run(["y"], {"x": np.empty((0, 7), np.float32)})[0].shape == (0, 5)
