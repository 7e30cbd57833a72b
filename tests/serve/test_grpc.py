"""KServe v2 gRPC (engine.server.grpc_service), proven with the official
tritonclient.grpc and its generated stubs: every RPC, raw and typed
contents, auth, errors as status codes with HTTP's messages, metrics and
log lines, drain."""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading

import grpc
import jwt
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from engine.server.grpc_connections import connected_peers, peer_key
from serve_support import free_port, metric, wait_for, wait_log, wait_queue_depth

F, IN, OUT = 784, "input", "logits"   # the zoo MLP 784-512-512-10
SECRET = b"grpc-test-secret-0123456789abcdef"
PER_CLIENT = 4   # limits.max_connections_per_client of `shared`: the module's fixtures hold at most 2


@pytest.fixture(scope="module")
def int64_model(tmp_path_factory):
    """ids INT64 [N,4] -> y FP32 = ids * 0.5: the zoo's other input datatype (bert_mini's)."""
    import onnx
    from onnx import TensorProto, helper

    from engine.convert import convert_file

    d = tmp_path_factory.mktemp("int64")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["f", "half"], ["y"])],
        "ids", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(d / "ids.onnx"))
    convert_file(d / "ids.onnx", d / "ids.aie")
    return d / "ids.aie"


@pytest.fixture(scope="module")
def shared(module_serve_factory, zoo_mlp, int64_model):
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8},
                                 {"name": "ids", "path": str(int64_model), "max_batch_size": 4}],
                                grpc_port=free_port(), limits={"max_body": 1 << 20,
                                                               "max_connections_per_client": PER_CLIENT})


@pytest.fixture(scope="module")
def client(shared):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{shared.config['grpc_port']}")
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(shared):
    with grpc.insecure_channel(f"127.0.0.1:{shared.config['grpc_port']}") as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _error(fn, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        fn(*args, **kwargs)
    return err.value


def _http_error(server, model: str, x: np.ndarray, name: str = IN, datatype: str = "FP32") -> tuple[int, str]:
    """The HTTP answer to the same tensor (binary), for comparing messages."""
    head = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": list(x.shape),
                                   "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    status, body, _ = server.post(f"/v2/models/{model}/infer", head + x.tobytes(),
                                  {"Inference-Header-Content-Length": str(len(head))})
    return status, json.loads(body)["error"]


def test_health_and_metadata_rpcs(shared, client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and not client.is_model_ready("nope")
    assert not client.is_model_ready("mlp", "7")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "ai-engine" and "binary_tensor_data" in meta["extensions"]
    http_meta = json.loads(shared.get("/v2/models/mlp")[1])
    meta = client.get_model_metadata("mlp", as_json=True)
    assert meta["name"] == "mlp" and meta["versions"] == http_meta["versions"]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["inputs"]] == \
        [(t["name"], t["datatype"], t["shape"]) for t in http_meta["inputs"]]
    # ModelConfig is what /v2/models/<m>/config says, in the proto.
    http_cfg = json.loads(shared.get("/v2/models/mlp/config")[1])
    cfg = client.get_model_config("mlp").config
    assert cfg.name == "mlp" and cfg.max_batch_size == http_cfg["max_batch_size"] == 8
    assert [(i.name, list(i.dims)) for i in cfg.input] == [(i["name"], i["dims"]) for i in http_cfg["input"]]
    assert cfg.input[0].data_type == grpcclient.model_config_pb2.TYPE_FP32
    assert cfg.dynamic_batching.max_queue_delay_microseconds == \
        http_cfg["dynamic_batching"]["max_queue_delay_microseconds"]
    assert cfg.instance_group[0].count == http_cfg["instance_group"][0]["count"]
    assert cfg.parameters["precision"].string_value == http_cfg["precision"]
    index = client.get_model_repository_index(as_json=True)["models"]
    assert sorted((m["name"], m["state"]) for m in index) == [("ids", "READY"), ("mlp", "READY")]
    before = client.get_inference_statistics("mlp").model_stats[0].inference_stats.success.count
    x = np.zeros((2, F), np.float32)
    inp = grpcclient.InferInput(IN, [2, F], "FP32")
    inp.set_data_from_numpy(x)
    client.infer("mlp", [inp])
    stats = client.get_inference_statistics("mlp").model_stats[0]
    assert stats.name == "mlp" and stats.inference_stats.success.count == before + 1
    assert {s.name for s in client.get_inference_statistics().model_stats} == {"mlp", "ids"}


def test_infer_raw_contents_matches_the_model(shared, client, zoo_mlp):
    session = zoo_mlp.session()
    rng = np.random.default_rng(21)
    for batch in (1, 3, 8):
        x = zoo_mlp.inputs(rng, batch)
        inp = grpcclient.InferInput(IN, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("mlp", [inp], outputs=[grpcclient.InferRequestedOutput(OUT)], request_id=f"r{batch}",
                              priority=1, timeout=10_000_000)
        y = result.as_numpy(OUT)
        assert y.dtype == np.float32 and y.shape == (batch, 10)
        close(y, session.run(None, {IN: x})[0])
        assert result.get_response().id == f"r{batch}"


def test_infer_typed_contents_and_int64(stub, zoo_mlp, client):
    """Typed `contents` (fp32_contents, int64_contents) give what raw gives."""
    x = zoo_mlp.inputs(np.random.default_rng(5), 2)
    req = service_pb2.ModelInferRequest(model_name="mlp", id="typed")
    t = req.inputs.add(name=IN, datatype="FP32", shape=[2, F])
    t.contents.fp32_contents.extend(x.ravel().tolist())
    resp = stub.ModelInfer(req)
    assert resp.id == "typed" and resp.outputs[0].name == OUT and list(resp.outputs[0].shape) == [2, 10]
    close(np.frombuffer(resp.raw_output_contents[0], "<f4").reshape(2, 10), zoo_mlp.session().run(None, {IN: x})[0])

    ids = np.array([[1, -2, 3, 1 << 40], [0, 5, 7, -9]], np.int64)
    want = ids.astype(np.float32) * np.float32(0.5)
    req = service_pb2.ModelInferRequest(model_name="ids")
    t = req.inputs.add(name="ids", datatype="INT64", shape=[2, 4])
    t.contents.int64_contents.extend(ids.ravel().tolist())
    resp = stub.ModelInfer(req)
    np.testing.assert_array_equal(np.frombuffer(resp.raw_output_contents[0], "<f4").reshape(2, 4), want)
    inp = grpcclient.InferInput("ids", [2, 4], "INT64")
    inp.set_data_from_numpy(ids)
    np.testing.assert_array_equal(client.infer("ids", [inp]).as_numpy("y"), want)
    # Streamed: each request answered in turn on one stream.
    stream = stub.ModelStreamInfer(iter([req, service_pb2.ModelInferRequest(model_name="nope")]))
    first, second = list(stream)
    np.testing.assert_array_equal(np.frombuffer(first.infer_response.raw_output_contents[0], "<f4").reshape(2, 4),
                                  want)
    assert second.error_message.startswith("unknown model 'nope'")


def test_errors_are_status_codes_with_http_messages(shared, client, stub):
    cases = [  # (model, array, input name, datatype) -> grpc code, HTTP status
        ("mlp", np.zeros((1, F - 1), np.float32), IN, "FP32", grpc.StatusCode.INVALID_ARGUMENT, 400),
        ("mlp", np.zeros((1, F), np.float64), IN, "FP64", grpc.StatusCode.INVALID_ARGUMENT, 400),
        ("mlp", np.zeros((1, F), np.float32), "other", "FP32", grpc.StatusCode.INVALID_ARGUMENT, 400),
        ("nope", np.zeros((1, F), np.float32), IN, "FP32", grpc.StatusCode.NOT_FOUND, 404),
    ]
    for model, x, name, datatype, code, status in cases:
        inp = grpcclient.InferInput(name, list(x.shape), datatype)
        inp.set_data_from_numpy(x)
        err = _error(client.infer, model, [inp])
        assert err.status() == f"StatusCode.{code.name}"
        assert (status, err.message()) == _http_error(shared, model, x, name, datatype)
    # Raw bytes that do not fit the shape: the HTTP decoder's wording.
    req = service_pb2.ModelInferRequest(model_name="mlp")
    req.inputs.add(name=IN, datatype="FP32", shape=[1, F])
    req.raw_input_contents.append(b"\0" * 12)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == f"input 'input': 12 raw bytes but shape [1, {F}] of FP32 needs {4 * F} bytes"
    # Over limits.max_body (1 MiB here): grpc's own refusal.
    big = np.zeros((96, F), np.float32)   # 301 KB... times 4 below
    inp = grpcclient.InferInput(IN, [4 * 96, F], "FP32")
    inp.set_data_from_numpy(np.concatenate([big] * 4))
    assert _error(client.infer, "mlp", [inp]).status() == "StatusCode.RESOURCE_EXHAUSTED"
    # CUDA memory is not served (system shared memory: test_shared_memory_regions_over_grpc).
    err = _error(client.get_cuda_shared_memory_status)
    assert err.status() == "StatusCode.UNIMPLEMENTED" and "CUDA shared memory is not supported" in err.message()
    assert client.is_server_live()


def test_connections_count_against_the_caps_with_http(shared, client):
    """limits.max_connections_per_client counts gRPC connections with HTTP's:
    past it, a new connection's RPCs get RESOURCE_EXHAUSTED and HTTP 503;
    closing one gives its place back to the refused connection."""
    port = shared.config["grpc_port"]
    x = np.ones((1, F), np.float32)

    def answers(c) -> bool:
        inp = grpcclient.InferInput(IN, [1, F], "FP32")
        inp.set_data_from_numpy(x)
        try:
            return c.infer("mlp", [inp]).as_numpy(OUT).shape == (1, 10)
        except InferenceServerException as exc:
            if "too many connections" not in exc.message():
                raise
            return False

    assert client.is_server_live()                  # the module's connections count too
    before = connected_peers(port)
    opened, refused = [], None
    try:
        for _ in range(PER_CLIENT + 1):
            # each client on a connection of its own (grpc shares one between equal channels by default)
            c = grpcclient.InferenceServerClient(f"127.0.0.1:{port}",
                                                 channel_args=[("grpc.use_local_subchannel_pool", 1)])
            opened.append(c)
            if not answers(c):
                refused = c
                break
        assert refused is not None and len(opened) <= PER_CLIENT
        err = _error(refused.is_server_live)
        assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert f"connections open from 127.0.0.1, the limit is {PER_CLIENT} (limits.max_connections_per_client)" \
            in err.message()
        status, body, _ = shared.get("/v2/health/live")       # HTTP sees the same count
        assert status == 503 and b"too many connections" in body
        opened[0].close()
        wait_for(lambda: answers(refused), "the refused connection to take the closed one's place")
    finally:
        for c in opened:
            c.close()
    # The closed connections' places come back at the next read of the kernel's table, at most
    # RECLAIM_INTERVAL_S after the last: the module's other tests find theirs.
    wait_for(lambda: connected_peers(port) <= before, "the closed gRPC connections to end")
    wait_for(lambda: shared.get("/v2/health/live")[0] == 200, "HTTP to be admitted again")


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_connected_peers_reads_the_kernels_table(family, host):
    """grpc_connections.connected_peers: the clients connected to a port, as
    grpc names its peers; a closed connection is gone from it."""
    try:
        listener = socket.socket(family)
        listener.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    with listener:
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection((host, port)) as conn:
            accepted, _ = listener.accept()
            mine = conn.getsockname()[1]
            assert connected_peers(port) == {(host, mine)}
            assert peer_key(f"ipv{4 if family == socket.AF_INET else 6}:{'[::1]' if ':' in host else host}:{mine}") \
                == (host, mine)
            accepted.close()
        assert connected_peers(port) == set()


def test_metrics_and_log_carry_protocol_and_trace(shared, client):
    before = metric(shared, "aie_requests_total", model="mlp", protocol="grpc", code=200) or 0
    inp = grpcclient.InferInput(IN, [1, F], "FP32")
    inp.set_data_from_numpy(np.ones((1, F), np.float32))
    trace = "0af7651916cd43dd8448eb211c80319c"
    client.infer("mlp", [inp], headers={"traceparent": f"00-{trace}-b7ad6b7169203331-01"})
    assert metric(shared, "aie_requests_total", model="mlp", protocol="grpc", code=200) == before + 1
    line = wait_log(shared, "request", trace_id=trace)
    assert line["protocol"] == "grpc" and line["method"] == "ModelInfer" and line["model"] == "mlp"
    assert line["parent_id"] == "b7ad6b7169203331" and line["status"] == 200 and line["batch"] == 1
    _error(client.get_model_metadata, "nope")
    assert metric(shared, "aie_requests_total", model="", protocol="grpc-meta", code=404) >= 1


def test_auth_bearer_in_metadata_and_reload(module_serve_factory, zoo_mlp, tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    (d / "secret").write_bytes(SECRET)
    server = module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}], grpc_port=free_port(), auth={
        "enabled": True, "algorithms": ["HS256"], "secret_file": str(d / "secret"), "open_health": True})
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.config['grpc_port']}")
    good = jwt.encode({"sub": "t", "scope": "infer", "exp": 4102444800}, SECRET, algorithm="HS256")
    inp = grpcclient.InferInput(IN, [1, F], "FP32")
    inp.set_data_from_numpy(np.zeros((1, F), np.float32))
    assert c.is_server_live() and c.is_server_ready()       # open like /v2/health/*
    for headers in ({}, {"authorization": "Bearer " + good[:-2] + "xx"}):
        err = _error(c.infer, "mlp", [inp], headers=headers)
        assert err.status() == "StatusCode.UNAUTHENTICATED"
        status, body, _ = server.post("/v2/models/mlp/infer", b"{}", headers)
        assert (status, err.message()) == (401, json.loads(body)["error"])
    assert _error(c.get_model_metadata, "mlp").status() == "StatusCode.UNAUTHENTICATED"
    bearer = {"authorization": f"Bearer {good}"}
    before = c.infer("mlp", [inp], headers=bearer).as_numpy(OUT)
    assert before.shape == (1, 10)
    # SIGHUP swaps the model under the gRPC server: the next answer is v2's (its last bias + 1).
    server.update_config(models=[{"name": "mlp", "path": str(zoo_mlp.v2)}])
    server.signal(signal.SIGHUP)
    assert wait_log(server, "reloaded")["failed"] == []
    close(c.infer("mlp", [inp], headers=bearer).as_numpy(OUT), before + 1)
    c.close()


def _input(x: np.ndarray, name: str = "x") -> grpcclient.InferInput:
    inp = grpcclient.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_queue_full_deadline_and_drain(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 1,
                             "max_queue_size": 1}], gate=run_gate, grpc_port=free_port())
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.config['grpc_port']}")
    x = np.full((1, 16), -0.5, np.float32)

    def request(timeout_us=None):
        return c.infer("m", [_input(x)], timeout=timeout_us)

    results: dict = {}

    def run(key, **kw):
        try:
            results[key] = request(**kw).as_numpy("y")
        except InferenceServerException as exc:
            results[key] = exc

    threads = [threading.Thread(target=run, args=("held",))]
    threads[0].start()
    run_gate.wait_started(1)
    threads.append(threading.Thread(target=run, args=("queued",), kwargs={"timeout_us": 200_000}))
    threads[1].start()
    wait_queue_depth(server, "m", 1)
    err = _error(request)                                   # the queue (1) is full
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED" and "queue full" in err.message()
    threads[1].join(30)                                     # its 0.2 s deadline passes in the queue
    assert results["queued"].status() == "StatusCode.DEADLINE_EXCEEDED"
    # The client's gRPC deadline bounds the scheduler's: the request leaves the queue when the
    # client gives up, instead of waiting there to run for no one.
    timeouts = metric(server, "aie_request_timeouts_total", model="m")
    gives_up = threading.Thread(target=lambda: results.update(gave_up=_error(
        c.infer, "m", [_input(x)], client_timeout=1.0)))
    gives_up.start()
    wait_queue_depth(server, "m", 1)
    wait_queue_depth(server, "m", 0)                        # the run is still held: its deadline took it out
    gives_up.join(30)
    assert results["gave_up"].status() == "StatusCode.DEADLINE_EXCEEDED"
    assert metric(server, "aie_request_timeouts_total", model="m") == timeouts + 1
    # Drain: SIGTERM while one RPC runs; it is answered, new ones are refused, exit 0.
    server.signal(signal.SIGTERM)
    wait_log(server, "draining")
    try:  # not ready while the drain delay lasts (0 here), refused once the listener closed
        assert not c.is_server_ready()
    except InferenceServerException as exc:
        # UNAVAILABLE once the listener is closed; CANCELLED when the call was accepted
        # just before and the gRPC server's stop ended it (both: not served, and said so)
        assert exc.status() in ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"), exc
    run_gate.release(1)
    threads[0].join(30)
    assert isinstance(results["held"], np.ndarray) and results["held"].shape == (1, 4)
    assert server.proc.wait(30) == 0
    assert wait_log(server, "stopped")["unanswered"] == 0
    c.close()


def test_missing_stubs_name_the_command(monkeypatch):
    from engine.server import grpc_stubs
    from engine.server.errors import ServeError

    monkeypatch.setitem(sys.modules, "engine.server.grpc_gen", None)   # import fails as if never generated
    with pytest.raises(ServeError) as err:
        grpc_stubs.load()
    assert "gRPC stubs are not generated" in str(err.value) and "invoke build-kernels" in err.value.hint


def test_generated_stubs_match_the_vendored_protos(tmp_path):
    """The build step writes importable stubs with package-relative imports."""
    from engine.server import grpc_stubs

    files = {p.name for p in grpc_stubs.generate(tmp_path / "gen")}
    assert {"grpc_service_pb2.py", "grpc_service_pb2_grpc.py", "model_config_pb2.py", "__init__.py"} <= files
    text = (tmp_path / "gen" / "grpc_service_pb2.py").read_text()
    assert "from engine.server.grpc_gen import model_config_pb2" in text and "\nimport model_config_pb2" not in text


def test_phases_in_log_metrics_and_trailing_metadata(shared, stub):
    """The five phases as on HTTP (engine.server.timing): the log line's add up
    to its latency, the histograms count protocol="grpc", and the answer's
    trailing metadata carries server-timing next to traceparent."""
    before = metric(shared, "aie_compute_duration_seconds_count", model="mlp", protocol="grpc") or 0
    req = service_pb2.ModelInferRequest(model_name="mlp", inputs=[service_pb2.ModelInferRequest.InferInputTensor(
        name=IN, datatype="FP32", shape=[1, F])], raw_input_contents=[np.ones((1, F), np.float32).tobytes()])
    trace = "1bf7651916cd43dd8448eb211c80319c"
    _, call = stub.ModelInfer.with_call(req, metadata=(("traceparent", f"00-{trace}-b7ad6b7169203331-01"),))
    trailing = dict(call.trailing_metadata())
    assert trailing["traceparent"].startswith(f"00-{trace}-")
    assert [part.split(";")[0] for part in trailing["server-timing"].split(", ")] == \
        ["network", "decode", "queue", "compute", "encode"]
    line = wait_log(shared, "request", trace_id=trace)
    spans = [line[f"{p}_us"] for p in ("network", "decode", "queue", "compute", "encode_write")]
    assert line["network_us"] == 0 and all(s >= 0 for s in spans)   # grpc's core reads the message
    assert line["latency_us"] - 5 <= sum(spans) <= line["latency_us"] + 1   # truncation to whole µs per field
    assert metric(shared, "aie_compute_duration_seconds_count", model="mlp", protocol="grpc") == before + 1


def test_shared_memory_regions_over_grpc(shared, client):
    """Triton's system shared memory over gRPC: register, input and output in
    a region (equal to the plain answer), status, misuse as INVALID_ARGUMENT
    with HTTP's message, unregister."""
    import uuid

    import tritonclient.utils.shared_memory as shm

    x = np.random.default_rng(11).standard_normal((2, F)).astype(np.float32)
    handle = shm.create_shared_memory_region("g", f"/aie-grpc-{uuid.uuid4().hex[:12]}", x.nbytes + 80)
    try:
        shm.set_shared_memory_region(handle, [x])
        client.register_system_shared_memory("g", handle._shm_key, x.nbytes + 80)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]["g"]
        assert (status["key"], int(status["byte_size"])) == (handle._shm_key, x.nbytes + 80)
        err = _error(client.register_system_shared_memory, "g", handle._shm_key, 16)
        assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'g'" in err.message()
        inp = grpcclient.InferInput(IN, [2, F], "FP32")
        inp.set_shared_memory("g", x.nbytes)
        out = grpcclient.InferRequestedOutput(OUT)
        out.set_shared_memory("g", 80, offset=x.nbytes)
        result = client.infer("mlp", [inp], outputs=[out])
        assert result.get_output(OUT).parameters["shared_memory_region"].string_param == "g"
        plain = grpcclient.InferInput(IN, [2, F], "FP32")
        plain.set_data_from_numpy(x)
        want = client.infer("mlp", [plain]).as_numpy(OUT)
        close(shm.get_contents_as_numpy(handle, np.float32, [2, 10], offset=x.nbytes), want)
        small = grpcclient.InferRequestedOutput(OUT)
        small.set_shared_memory("g", 40, offset=x.nbytes)
        err = _error(client.infer, "mlp", [inp], outputs=[small])
        assert err.status() == "StatusCode.INVALID_ARGUMENT" and "does not fit" in err.message()
        client.unregister_system_shared_memory("g")
        err = _error(client.infer, "mlp", [inp])
        assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'g'" in err.message()
        assert client.infer("mlp", [plain]).as_numpy(OUT).shape == (2, 10)   # still serving
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle)


def test_raw_contents_bypass_protobuf():
    """Raw inputs are views of the received bytes, cut out of an otherwise
    protobuf-parsed message; raw outputs are appended to the serialised
    message. Either way the bytes are what protobuf itself reads and writes."""
    from engine.server.grpc_codec import InferRequest, InferResponse, encode_response
    from engine.server.grpc_service import deadline_us

    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(5, dtype=np.int64)
    req = service_pb2.ModelInferRequest(model_name="m", id="r1")
    req.inputs.add(name="a", datatype="FP32", shape=a.shape)
    req.inputs.add(name="b", datatype="INT64", shape=b.shape)
    req.parameters["priority"].int64_param = 2
    req.raw_input_contents.extend([a.tobytes(), b.tobytes()])
    req.outputs.add(name="y")
    data = req.SerializeToString()
    got = InferRequest.parser(service_pb2.ModelInferRequest)(data)
    assert got.nbytes == len(data) and not got.message.raw_input_contents
    assert all(isinstance(v, memoryview) and v.obj is data for v in got.raw)      # views, not copies
    assert [bytes(v) for v in got.raw] == [a.tobytes(), b.tobytes()]
    del req.raw_input_contents[:]
    assert got.message == req
    # Not a message: protobuf's own parser refuses it (grpc answers INTERNAL, as it did).
    from google.protobuf.message import DecodeError
    with pytest.raises(DecodeError):
        InferRequest.parser(service_pb2.ModelInferRequest)(b"\x0a\xff\xff")

    class Model:
        name, version = "m", "1"
    y, z = np.linspace(-1, 1, 7, dtype=np.float32).reshape(7, 1), np.zeros((0, 2), np.int32)
    resp = encode_response(service_pb2, Model(), {"y": y[::2], "z": z}, {"y": None, "z": None}, "r1")
    parsed = service_pb2.ModelInferResponse.FromString(
        InferResponse.serializer(service_pb2.ModelInferResponse)(resp))
    assert [bytes(r) for r in parsed.raw_output_contents] == [y[::2].tobytes(), b""]
    assert [list(t.shape) for t in parsed.outputs] == [[4, 1], [0, 2]] and parsed.id == "r1"
    assert resp.materialize() == parsed
    # The client's deadline only ever shortens the scheduler's; one already past is refused, not unbounded.
    assert deadline_us(None, None, 0) is None and deadline_us(5000, None, 0) == 5000
    assert deadline_us(None, 0.25, 0) == 250_000 and deadline_us(None, 0.25, 100_000) == 100_000
    assert deadline_us(500_000, 0.25, 0) == 250_000 and deadline_us(1000, 0.25, 0) == 1000
    assert deadline_us(None, -1.0, 0) == 1 and deadline_us(-5, 0.25, 0) == -5
