"""Shape buckets served (engine.yaml models[].buckets, engine.server.buckets):
bert_mini with a sequence length that changes every request answers, over
every protocol, what the unpadded session computes, from one plan per
bucket built before the server reports ready; a length above the largest
bucket runs on a plan of its own; configs that do not fit the model are
refused at start-up naming the key."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
import yaml

from engine.client import Client
from engine.server.models import NUMPY_TO_KSERVE
from engine.session import InferenceSession
from serve_support import free_port, startup_error, wait_log

REPO = Path(__file__).resolve().parents[2]

SIZES = [16, 32, 64]
BUCKETS = {"sizes": SIZES, "inputs": {"input_ids": {"axis": 1}, "attention_mask": {"axis": 1, "pad": 0}},
           "outputs": {"last_hidden_state": 1}}
RNG = np.random.default_rng(11)


# One line naming the key, the input's dtype and the value (engine.shape_buckets.bucket_pad).
PAD_INT64 = (r"bucket input 'attention_mask' pad {value}: not a value of its dtype int64 "
             r"\(expected an integer in -9223372036854775808\.\.9223372036854775807\)")
STARTUP_PAD = r"error: model 'bert': buckets: " + PAD_INT64 + "$"


def feeds(seq: int, batch: int = 1) -> dict[str, np.ndarray]:
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - min(3, seq - 1):] = 0  # the sender's own padding of its last row stays masked
    return {"input_ids": RNG.integers(1, 8192, (batch, seq)).astype(np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def bert(zoo, module_serve_factory):
    path = zoo("bert_mini")
    server = module_serve_factory([{"name": "bert", "path": str(path), "max_batch_size": 8, "buckets": BUCKETS}],
                                  grpc_port=free_port(), limits={"max_body": 16 << 20})
    return server, InferenceSession(path, threads=1)


def stats(server) -> dict:
    return json.loads(server.get("/v2/models/bert/stats")[1])["model_stats"][0]["plan_builds"]


def infer_json(server, f: dict) -> dict[str, np.ndarray]:
    body = json.dumps({"inputs": [{"name": n, "shape": list(a.shape), "datatype": NUMPY_TO_KSERVE[a.dtype],
                                   "data": a.ravel().tolist()} for n, a in f.items()]}).encode()
    status, raw, _ = server.post("/v2/models/bert/infer", body)
    assert status == 200, raw
    return {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"]) for o in json.loads(raw)["outputs"]}


def infer_http_binary(server, f: dict) -> dict[str, np.ndarray]:
    with httpclient.InferenceServerClient(server.url) as c:
        inputs = []
        for n, a in f.items():
            inputs.append(httpclient.InferInput(n, list(a.shape), NUMPY_TO_KSERVE[a.dtype]))
            inputs[-1].set_data_from_numpy(a, binary_data=True)
        res = c.infer("bert", inputs)
        return {o["name"]: res.as_numpy(o["name"]) for o in res.get_response()["outputs"]}


def infer_grpc(server, f: dict) -> dict[str, np.ndarray]:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.config['grpc_port']}") as c:
        inputs = []
        for n, a in f.items():
            inputs.append(grpcclient.InferInput(n, list(a.shape), NUMPY_TO_KSERVE[a.dtype]))
            inputs[-1].set_data_from_numpy(a)
        res = c.infer("bert", inputs)
        return {o.name: res.as_numpy(o.name) for o in res.get_response().outputs}


def infer_binary(server, f: dict) -> dict[str, np.ndarray]:
    with Client(port=server.binary_port) as c:
        return c.infer("bert", f)


PROTOCOLS = {"json": infer_json, "http-binary": infer_http_binary, "grpc": infer_grpc, "binary": infer_binary}


def assert_unpadded(got: dict, reference: InferenceSession, f: dict) -> None:
    want = dict(zip(["last_hidden_state", "pooler_output"], reference.run(None, f)))
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=2e-5, err_msg=name)


def test_the_buckets_are_built_before_ready(bert):
    """max_batch_size 8, no preferred sizes: every bucket alone and at the
    full batch, 6 plans, which engine.plan_cache_size (8) holds."""
    server, _ = bert
    report = stats(server)
    assert "buckets" in report["sources"] and "capped" not in report
    assert [s["input_ids"] for s in report["shapes"]][-2 * len(SIZES):] == [[b, n] for b in (1, 8) for n in SIZES]
    assert report["warm"] == report["built"] >= 2 * len(SIZES)


def test_every_batch_the_batcher_aims_at_runs_on_a_plan_warm_up_built(zoo, module_serve_factory, bert):
    """max_batch_size 3, preferred size 2: batches of 1, 2 and 3 of every
    bucket (9 plans, in a plan cache of 12) are built before ready, so a
    batch of 2 or 3 rows at any length up to the largest bucket builds none."""
    _, reference = bert
    server = module_serve_factory([{"name": "bert", "path": str(zoo("bert_mini")), "max_batch_size": 3,
                                    "preferred_batch_sizes": [2], "buckets": BUCKETS}], plan_cache_size=12)
    report = stats(server)
    assert [s["input_ids"] for s in report["shapes"]][-9:] == [[b, n] for b in (1, 3, 2) for n in SIZES]
    before = report["built"]
    with Client(port=server.binary_port) as c:
        for length in (10, 20, 40):  # one length in each bucket, none a bucket size
            for rows in (2, 3):
                f = feeds(length, batch=rows)
                assert_unpadded(c.infer("bert", f), reference, f)
    assert stats(server)["built"] == before


def test_warm_up_stops_at_the_plan_cache_size_and_says_so(zoo, serve_factory):
    """Batches 1, 4 and 2 of 2 buckets are 6 plans; a cache of 4 holds the
    first 4 (batch 1 and 4 of each), and start-up logs one warning naming
    the keys to change."""
    server = serve_factory([{"name": "bert", "path": str(zoo("bert_mini")), "max_batch_size": 4,
                             "preferred_batch_sizes": [2], "buckets": {**BUCKETS, "sizes": [16, 32]}}],
                           plan_cache_size=4)
    report = stats(server)
    assert [s["input_ids"] for s in report["shapes"]] == [[1, 16], [1, 32], [4, 16], [4, 32]]
    expected = ("buckets: 2 sizes x batch sizes [1, 4, 2] are 6 plans, more than engine.plan_cache_size (4) "
                "holds: warm-up built 4 of them, the others build on first use (raise plan_cache_size or "
                "list fewer preferred_batch_sizes)")
    assert report["capped"] == expected
    warnings = [e for e in server.logs() if e.get("event") == "warm_plans_capped"]
    assert [(e["model"], e["detail"]) for e in warnings] == [("bert", expected)]
    # A reload (SIGHUP) says it again: the operator who reads only the
    # latest lines still learns that some plans build on first use.
    server.signal(signal.SIGHUP)
    wait_log(server, "reloaded")
    warnings = [e for e in server.logs() if e.get("event") == "warm_plans_capped"]
    assert [(e["model"], e["detail"]) for e in warnings] == [("bert", expected)] * 2


def test_the_model_config_shows_the_buckets_over_http_and_grpc(bert):
    """Triton's way: dims stay -1 on the bucketed axes; the buckets are JSON
    in the model's parameters (ModelConfig.parameters["shape_buckets"])."""
    server, _ = bert
    want = {"sizes": SIZES, "inputs": {"input_ids": {"axis": 1, "pad": 0}, "attention_mask": {"axis": 1, "pad": 0}},
            "outputs": {"last_hidden_state": 1}}
    with httpclient.InferenceServerClient(server.url) as c:
        config = c.get_model_config("bert")
    assert json.loads(config["parameters"]["shape_buckets"]["string_value"]) == want
    assert {t["name"]: t["dims"] for t in config["input"]} == {"input_ids": [-1], "attention_mask": [-1]}
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.config['grpc_port']}") as c:
        config = c.get_model_config("bert").config
    assert json.loads(config.parameters["shape_buckets"].string_value) == want
    assert {t.name: list(t.dims) for t in config.input} == {"input_ids": [-1], "attention_mask": [-1]}


def test_every_protocol_answers_the_unpadded_outputs_from_the_bucket_plans(bert):
    server, reference = bert
    before = stats(server)["built"]
    lengths = iter(range(5, 64, 3))  # every request a new length, none a bucket size
    for protocol, infer in PROTOCOLS.items():
        for _ in range(5):
            f = feeds(next(lengths))
            assert_unpadded(infer(server, f), reference, f)
    assert stats(server)["built"] == before  # 20 lengths, every one served by a plan warm-up built


def test_inputs_and_outputs_in_shared_memory_are_padded_and_cut_like_any_other(bert):
    """Inputs read from a system shared memory region are padded at
    admission; the outputs written to one are the request's own size."""
    server, reference = bert
    f = feeds(21, batch=2)
    want = dict(zip(["last_hidden_state", "pooler_output"], reference.run(None, f)))
    in_bytes = sum(a.nbytes for a in f.values())
    out_bytes = sum(a.nbytes for a in want.values())
    region = shm.create_shared_memory_region("buckets", f"/aie-test-buckets-{os.getpid()}", in_bytes + out_bytes)
    try:
        shm.set_shared_memory_region(region, list(f.values()))
        with httpclient.InferenceServerClient(server.url) as c:
            c.register_system_shared_memory("buckets", region._shm_key, in_bytes + out_bytes)
            inputs, offset = [], 0
            for n, a in f.items():
                inputs.append(httpclient.InferInput(n, list(a.shape), NUMPY_TO_KSERVE[a.dtype]))
                inputs[-1].set_shared_memory("buckets", a.nbytes, offset=offset)
                offset += a.nbytes
            outputs, places = [], {}
            for n, a in want.items():
                outputs.append(httpclient.InferRequestedOutput(n))
                outputs[-1].set_shared_memory("buckets", a.nbytes, offset=offset)
                places[n], offset = offset, offset + a.nbytes
            c.infer("bert", inputs, outputs=outputs)
            c.unregister_system_shared_memory("buckets")
        for n, w in want.items():
            got = shm.get_contents_as_numpy(region, np.float32, list(w.shape), offset=places[n])
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=2e-5, err_msg=n)
    finally:
        shm.destroy_shared_memory_region(region)


def test_a_length_above_the_largest_bucket_runs_unpadded_on_its_own_plan(bert):
    server, reference = bert
    before = stats(server)["built"]
    f = feeds(70, batch=1)
    assert_unpadded(infer_binary(server, f), reference, f)
    assert stats(server)["built"] == before + 1


def test_pipelined_requests_of_several_rows_answer_the_unpadded_outputs(bert):
    server, reference = bert
    sent = [feeds(n, batch=b) for n, b in ((9, 1), (12, 2), (15, 1), (11, 1), (13, 3), (10, 1))]
    with Client(port=server.binary_port) as c:
        got = c.infer_many("bert", sent, window=len(sent))
    for g, f in zip(got, sent):
        assert_unpadded(g, reference, f)


def test_requests_of_different_lengths_in_one_bucket_run_as_one_batch(zoo, module_serve_factory, bert):
    """A fixed 1 s window and max_batch_size 4: the requests queued behind the
    first (lengths 9..13, all padded to 16) leave as one batch once four are
    there, which takes microseconds, not the window."""
    _, reference = bert
    server = module_serve_factory([{"name": "bert", "path": str(zoo("bert_mini")), "max_batch_size": 4,
                                    "max_queue_delay_us": 1_000_000, "buckets": BUCKETS}])
    sent = [feeds(n) for n in range(9, 14)]
    with Client(port=server.binary_port) as c:
        got = c.infer_many("bert", sent, window=len(sent))
    for g, f in zip(got, sent):
        assert_unpadded(g, reference, f)
    counts = json.loads(server.get("/v2/models/bert/stats")[1])["model_stats"][0]
    assert counts["inference_count"] == len(sent)  # warm-up's requests are not counted
    assert counts["execution_count"] <= 2, counts


def test_bucketed_inputs_that_disagree_are_refused(bert):
    server, _ = bert
    f = {"input_ids": np.ones((1, 9), np.int64), "attention_mask": np.ones((1, 10), np.int64)}
    status, raw, _ = server.post("/v2/models/bert/infer", json.dumps({"inputs": [
        {"name": n, "shape": list(a.shape), "datatype": "INT64", "data": a.ravel().tolist()}
        for n, a in f.items()]}).encode())
    assert status == 400 and "must agree in size along their bucketed axes" in json.loads(raw)["error"]


@pytest.mark.parametrize("buckets, expected", [
    ({**BUCKETS, "inputs": {"ids": {"axis": 1}}},
     r"model 'bert': buckets: bucket input 'ids' axis 1: expected an input with a symbolic dim there \(no such input"),
    ({**BUCKETS, "inputs": {"input_ids": {"axis": 2}}}, r"bucket input 'input_ids' axis 2: .*dims \['N', 'S'\]"),
    ({**BUCKETS, "outputs": {"hidden": 1}}, r"buckets: bucket outputs \['hidden'\] are not outputs of the model"),
    ({**BUCKETS, "outputs": {"pooler_output": 1}}, r"bucket output 'pooler_output' axis 1: .*dims \['N', 256\]"),
    ({**BUCKETS, "inputs": {"input_ids": {"axis": 0}}}, r"input 'input_ids' axis 0 is the batch axis"),
    ({**BUCKETS, "sizes": [32, 16]}, r"engine.models\[0\].buckets.sizes: must be ascending without repeats, "
                                      r"got \[32, 16\]"),
    ({**BUCKETS, "sizes": [0, 16]}, r"engine.models\[0\].buckets.sizes\[0\]"),
    ({**BUCKETS, "sizes": list(range(1, 20))}, r"19 buckets, more than engine.plan_cache_size \(8\)"),
    ({"sizes": [16]}, r"engine.models\[0\].buckets"),
    ({**BUCKETS, "inputs": {"attention_mask": {"axis": 1, "pad": 0.5}}}, STARTUP_PAD.format(value="0.5")),
    ({**BUCKETS, "inputs": {"attention_mask": {"axis": 1, "pad": float("nan")}}}, STARTUP_PAD.format(value="nan")),
    ({**BUCKETS, "inputs": {"attention_mask": {"axis": 1, "pad": float("-inf")}}}, STARTUP_PAD.format(value="-inf")),
    ({**BUCKETS, "inputs": {"attention_mask": {"axis": 1, "pad": 2 ** 63}}},
     STARTUP_PAD.format(value=str(2 ** 63))),
], ids=["unknown-input", "axis-range", "unknown-output", "static-output-axis", "batch-axis", "descending", "zero",
        "too-many", "no-inputs", "fraction-pad", "nan-pad", "inf-pad", "out-of-range-pad"])
def test_bad_buckets_refuse_to_start_naming_the_key(zoo, tmp_path, buckets, expected):
    err = startup_error(tmp_path, {"http_port": free_port(), "binary_port": None, "threads": 1,
                                   "state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path / "log"),
                                   "models": [{"name": "bert", "path": str(zoo("bert_mini")), "buckets": buckets}]},
                        npz_backend=False)
    assert re.search(expected, err), err


def test_conversion_plans_the_largest_bucket_and_refuses_buckets_that_do_not_fit(zoo, tmp_path):
    from engine.convert import convert_file
    from engine.deploy.convert_models import check_buckets, precision_options
    from engine.errors import ConversionError

    model = {"name": "bert", "buckets": BUCKETS, "shapes": {"input_ids": [1, 20], "attention_mask": [1, 20]}}
    options = precision_options(model)
    assert options.max_shapes == {"input_ids": [1, 64], "attention_mask": [1, 64]}
    summary = convert_file(zoo("bert_mini"), tmp_path / "bert.aie", precision=options)
    assert {"input_ids": [1, 64], "attention_mask": [1, 64]} in [p["inputs"] for p in summary.planned_shapes]
    check_buckets(model, tmp_path / "bert.aie")
    with pytest.raises(ConversionError, match=r"model 'bert': bucket outputs \['hidden'\] are not outputs") as err:
        check_buckets({**model, "buckets": {**BUCKETS, "outputs": {"hidden": 1}}}, tmp_path / "bert.aie")
    assert err.value.where == "engine.models[bert].buckets"
    assert not (tmp_path / "bert.aie").exists()  # refused: nothing left to deploy


def test_conversion_refuses_a_pad_its_input_cannot_hold(zoo, tmp_path):
    from engine.convert import convert_file
    from engine.deploy.convert_models import check_buckets
    from engine.errors import ConversionError

    convert_file(zoo("bert_mini"), tmp_path / "bert.aie")
    bad = {"name": "bert", "buckets": {**BUCKETS, "inputs": {"attention_mask": {"axis": 1, "pad": 0.5}}}}
    with pytest.raises(ConversionError, match="model 'bert': " + PAD_INT64.format(value="0.5")):
        check_buckets(bad, tmp_path / "bert.aie")
    assert not (tmp_path / "bert.aie").exists()


def _uint8_and_bool_model(path) -> None:
    """ids uint8, keep bool and scale float16, each [N, S] and passed
    through: what a pad check needs of a model, and nothing else."""
    import onnx
    from onnx import TensorProto, helper

    types = {"ids": TensorProto.UINT8, "keep": TensorProto.BOOL, "scale": TensorProto.FLOAT16}
    graph = helper.make_graph(
        [helper.make_node("Identity", [n], [n + "_out"]) for n in types], "pads",
        [helper.make_tensor_value_info(n, t, ["N", "S"]) for n, t in types.items()],
        [helper.make_tensor_value_info(n + "_out", t, ["N", "S"]) for n, t in types.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("inputs, expected", [
    ({"ids": {"axis": 1, "pad": 300}}, "bucket input 'ids' pad 300: not a value of its dtype uint8 "
                                        "(expected an integer in 0..255)"),
    ({"ids": {"axis": 1, "pad": -1}}, "bucket input 'ids' pad -1: not a value of its dtype uint8 "
                                       "(expected an integer in 0..255)"),
    ({"keep": {"axis": 1, "pad": 2}}, "bucket input 'keep' pad 2: not a value of its dtype bool (expected 0 or 1)"),
    ({"keep": {"axis": 1, "pad": 0.5}}, "bucket input 'keep' pad 0.5: not a value of its dtype bool "
                                         "(expected 0 or 1)"),
    ({"scale": {"axis": 1, "pad": 1e6}}, "bucket input 'scale' pad 1000000.0: not a value of its dtype float16 "
                                          "(expected a number within +-65504)"),
    ({"idz": {"axis": 1}}, "bucket input 'idz' axis 1: expected an input with a symbolic dim there (no such input"),
], ids=["uint8-300", "uint8-negative", "bool-2", "bool-fraction", "fp16-range", "not-the-model"])
def test_the_spec_check_holds_buckets_to_the_model_when_its_source_is_here(tmp_path, inputs, expected):
    """The spec check (render, convert, deploy) reads the ONNX source's
    inputs and applies the rules conversion and start-up apply, with the
    same text; a source that is not there is left to conversion."""
    from hostspec.errors import SpecError
    from hostspec.loader import load_spec

    _uint8_and_bool_model(tmp_path / "m.onnx")
    model = {"name": "m", "source": "m.onnx", "max_batch_size": 0, "buckets": {"sizes": [8, 16], "inputs": inputs}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"version": 1, "engine": {"models": [model]}}))
    with pytest.raises(SpecError) as info:
        load_spec([spec])
    problems = [str(p) for p in info.value.problems]
    assert len(problems) == 1 and f"engine.models[0].buckets: {expected}" in problems[0], problems
    (tmp_path / "m.onnx").unlink()
    assert load_spec([spec]).data["engine"]["models"][0]["buckets"]["inputs"] == inputs


def test_invoke_render_refuses_a_bad_pad_in_one_line(tmp_path):
    _uint8_and_bool_model(tmp_path / "m.onnx")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nengine:\n  models:\n    - name: m\n      source: m.onnx\n"
                    "      buckets: {sizes: [8, 16], inputs: {ids: {axis: 1, pad: 300}}}\n")
    out = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "render", "--spec", str(spec),
                          "--out", str(tmp_path / "rootfs")], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert [line for line in out.stderr.splitlines() if "engine.models[0].buckets" in line] == [
        f"{spec}:6: engine.models[0].buckets: bucket input 'ids' pad 300: not a value of its dtype uint8 "
        "(expected an integer in 0..255) (name the model's inputs and outputs, a symbolic axis of each, and a pad "
        "value of each input's dtype)"], out.stderr
    assert not (tmp_path / "rootfs").exists()


def test_non_finite_float_pads_are_strict_json_in_the_model_config(tmp_path, serve_factory):
    """A float input padded with -inf (a max over the padded axis ignores
    it) or NaN: json.dumps would write the bare words -Infinity / NaN, which
    strict parsers refuse; the config writes them as protobuf's JSON mapping
    does, as strings, and the padded positions never reach the answer."""
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["z"], ["w"])], "pads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, "n"])])
    path = tmp_path / "pads.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    buckets = {"sizes": [4, 8], "outputs": {"y": 1, "w": 1},
               "inputs": {"x": {"axis": 1, "pad": float("-inf")}, "z": {"axis": 1, "pad": float("nan")}}}
    server = serve_factory([{"name": "pads", "path": str(path), "max_batch_size": 0, "buckets": buckets}])
    status, raw, _ = server.get("/v2/models/pads/config")
    assert status == 200, raw
    text = json.loads(raw)["parameters"]["shape_buckets"]["string_value"]
    strict = json.loads(text, parse_constant=lambda word: pytest.fail(f"non-JSON literal {word} in {text}"))
    assert strict["inputs"] == {"x": {"axis": 1, "pad": "-Infinity"}, "z": {"axis": 1, "pad": "NaN"}}
    x = RNG.standard_normal((1, 5)).astype(np.float32)
    with Client(port=server.binary_port) as c:
        got = c.infer("pads", {"x": x, "z": x})
    np.testing.assert_array_equal(got["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["w"], -x)
