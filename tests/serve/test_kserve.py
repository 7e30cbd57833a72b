"""KServe v2 compatibility, proven with the official tritonclient.http."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from serve_support import parse_prometheus, wait_log
from kernel_mlp import MLPSession, reference


F, IN, OUT = 784, "input", "logits"   # the zoo MLP 784-512-512-10


@pytest.fixture
def server(serve_factory, zoo_mlp):
    return serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8}])


@pytest.fixture(scope="module")
def shared(module_serve_factory, zoo_mlp):
    """A server for tests that assert no counters."""
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8}])


def close(a, b):
    # Same kernels; batch composition and thread count may change summation order.
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_kernel_session_matches_float64(mlp_file):
    x = np.random.default_rng(3).standard_normal((7, 16)).astype(np.float32)
    got = MLPSession(str(mlp_file)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference(mlp_file, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_infer(shared, zoo_mlp, binary):
    client = httpclient.InferenceServerClient(url=shared.url)
    session = zoo_mlp.session()
    rng = np.random.default_rng(11)
    for batch in (1, 3, 8):
        x = zoo_mlp.inputs(rng, batch)
        inp = httpclient.InferInput(IN, list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        out = httpclient.InferRequestedOutput(OUT, binary_data=binary)
        result = client.infer("mlp", [inp], outputs=[out], request_id=f"r{batch}")
        y = result.as_numpy(OUT)
        assert y.dtype == np.float32 and y.shape == (batch, 10)
        close(y, session.run(None, {IN: x})[0])
        assert result.get_response()["id"] == f"r{batch}"
    # No outputs listed: the client asks for every output in binary form.
    x = zoo_mlp.inputs(rng, 2)
    inp = httpclient.InferInput(IN, [2, F], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    close(client.infer("mlp", [inp]).as_numpy(OUT), session.run(None, {IN: x})[0])


def test_metadata_health_and_stats(server):
    client = httpclient.InferenceServerClient(url=server.url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and not client.is_model_ready("nope")
    meta = client.get_server_metadata()
    assert meta["name"] == "ai-engine" and "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("mlp")
    assert model["inputs"] == [{"name": IN, "datatype": "FP32", "shape": [-1, F]}]
    assert model["outputs"] == [{"name": OUT, "datatype": "FP32", "shape": [-1, 10]}]
    assert client.get_model_metadata("mlp", model_version="1")["versions"] == ["1"]
    config = client.get_model_config("mlp")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [F]

    x = np.ones((2, F), np.float32) * np.linspace(-1, 1, F, dtype=np.float32)
    inp = httpclient.InferInput(IN, [2, F], "FP32")
    inp.set_data_from_numpy(x)
    client.infer("mlp", [inp])
    stats = client.get_inference_statistics("mlp")["model_stats"][0]
    assert stats["name"] == "mlp" and stats["inference_count"] == 2 and stats["execution_count"] == 1
    assert stats["inference_stats"]["success"]["count"] == 1
    assert stats["batch_stats"][0]["batch_size"] == 2
    assert stats["last_inference"] > 0

    status, body, _ = server.get("/health")
    health = json.loads(body)
    assert status == 200 and health["status"] == "ok" and health["rss_bytes"] > 0
    assert health["models"]["mlp"]["queue_length"] == 0 and health["models"]["mlp"]["last_inference_latency_ms"] > 0
    assert health["kernel_isa"] in ("scalar", "avx2", "avx512") and health["device"] == "cpu"

    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("mlp", model_version="7")
    assert "version" in str(err.value) and err.value.status() == "404"


def test_metrics_prometheus(server):
    client = httpclient.InferenceServerClient(url=server.url)
    x = np.random.default_rng(5).standard_normal((3, F)).astype(np.float32)
    inp = httpclient.InferInput(IN, [3, F], "FP32")
    inp.set_data_from_numpy(x)
    for _ in range(4):
        client.infer("mlp", [inp])
    bad = httpclient.InferInput(IN, [3, F - 1], "FP32")
    bad.set_data_from_numpy(x[:, 1:].copy())
    with pytest.raises(InferenceServerException):
        client.infer("mlp", [bad])
    status, body, headers = server.get("/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    m = parse_prometheus(body.decode())
    assert m[("aie_requests_total", (("code", "200"), ("model", "mlp"), ("protocol", "http")))] == 4
    assert m[("aie_requests_total", (("code", "400"), ("model", "mlp"), ("protocol", "http")))] == 1
    assert m[("aie_inference_count_total", (("model", "mlp"),))] == 12
    assert m[("aie_execution_count_total", (("model", "mlp"),))] == 4
    # The phases count answered requests; the request duration every answer (the 400 too).
    assert m[("aie_compute_duration_seconds_count", (("model", "mlp"), ("protocol", "http")))] == 4
    assert m[("aie_queue_duration_seconds_bucket", (("le", "+Inf"), ("model", "mlp"), ("protocol", "http")))] == 4
    assert m[("aie_request_duration_seconds_count", (("model", "mlp"), ("protocol", "http")))] == 5
    assert m[("aie_queue_depth", (("model", "mlp"),))] == 0
    assert m[("aie_model_load_error", (("model", "mlp"),))] == 0


def test_errors_say_what_the_model_expects(shared):
    client = httpclient.InferenceServerClient(url=shared.url)
    x = np.zeros((1, F), np.float64) + 0.5
    cases = [
        (httpclient.InferInput(IN, [1, F], "FP64"), x, "expects FP32"),
        (httpclient.InferInput("z", [1, F], "FP32"), x.astype(np.float32), "no input 'z'"),
        (httpclient.InferInput(IN, [1, F, 1], "FP32"), x.astype(np.float32).reshape(1, F, 1), "expects [-1, 784]"),
        (httpclient.InferInput(IN, [9, F], "FP32"), np.ones((9, F), np.float32), "outside 1..8"),
    ]
    for inp, data, expected in cases:
        inp.set_data_from_numpy(data, binary_data=False)
        with pytest.raises(InferenceServerException) as err:
            client.infer("mlp", [inp])
        assert err.value.status() == "400" and expected in err.value.message(), err.value.message()
    inp = httpclient.InferInput(IN, [1, F], "FP32")
    inp.set_data_from_numpy(x.astype(np.float32))
    with pytest.raises(InferenceServerException) as err:
        client.infer("missing", [inp])
    assert err.value.status() == "404" and "unknown model 'missing'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer("mlp", [inp], outputs=[httpclient.InferRequestedOutput("nope")])
    assert err.value.status() == "400" and "no output 'nope'" in err.value.message()


def test_traceparent_and_request_log(shared):
    server = shared
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = json.dumps({"inputs": [{"name": IN, "shape": [1, F], "datatype": "FP32",
                                   "data": [[0.01 * i for i in range(F)]]}]}).encode()
    status, resp, headers = server.post("/v2/models/mlp/infer", body, {"traceparent": parent})
    assert status == 200
    tp = headers["traceparent"].split("-")
    assert tp[1] == "4bf92f3577b34da6a3ce929d0e0e4736" and tp[2] != "00f067aa0ba902b7"
    rec = wait_log(server, "request", trace_id=tp[1])  # the log line is written just after the response
    assert len([r for r in server.logs() if r.get("event") == "request" and r.get("trace_id") == tp[1]]) == 1
    assert rec["parent_id"] == "00f067aa0ba902b7" and rec["model"] == "mlp" and rec["status"] == 200
    assert rec["batch"] == 1 and rec["queue_us"] >= 0 and rec["compute_us"] > 0
