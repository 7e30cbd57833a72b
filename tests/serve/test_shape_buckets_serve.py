"""Shape buckets served (engine.yaml models[].buckets, engine.server.buckets):
bert_mini with a sequence length that changes every request answers, over
every protocol, what the unpadded session computes, from one plan per
bucket built before the server reports ready; a length above the largest
bucket runs on a plan of its own; configs that do not fit the model are
refused at start-up naming the key."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from engine.client import Client
from engine.server.models import NUMPY_TO_KSERVE
from engine.session import InferenceSession
from serve_support import free_port, startup_error

SIZES = [16, 32, 64]
BUCKETS = {"sizes": SIZES, "inputs": {"input_ids": {"axis": 1}, "attention_mask": {"axis": 1, "pad": 0}},
           "outputs": {"last_hidden_state": 1}}
RNG = np.random.default_rng(11)


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
    server, _ = bert
    report = stats(server)
    assert "buckets" in report["sources"]
    assert [s["input_ids"] for s in report["shapes"]][-len(SIZES):] == [[1, n] for n in SIZES]
    assert report["warm"] == report["built"] >= len(SIZES)


def test_every_protocol_answers_the_unpadded_outputs_from_the_bucket_plans(bert):
    server, reference = bert
    before = stats(server)["built"]
    lengths = iter(range(5, 64, 3))  # every request a new length, none a bucket size
    for protocol, infer in PROTOCOLS.items():
        for _ in range(5):
            f = feeds(next(lengths))
            assert_unpadded(infer(server, f), reference, f)
    assert stats(server)["built"] == before  # 20 lengths, every one served by a plan warm-up built


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
], ids=["unknown-input", "axis-range", "unknown-output", "static-output-axis", "batch-axis", "descending", "zero",
        "too-many", "no-inputs"])
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
