"""Triton's system shared-memory extension (engine.server.shm), through the
official tritonclient.http and tritonclient.utils.shared_memory against one
real server (auth on: regions belong to the token's subject), plus unit
tests of the registry's checks on objects made here."""

from __future__ import annotations

import http.client
import json
import mmap
import os
import time
import uuid

import jwt
import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto as T
from onnx import helper as h
from tritonclient.utils import InferenceServerException

from engine.server.config import LimitsConfig
from engine.server.errors import ServeError
from engine.server.shm import SystemSharedMemory, check_key

AUD, ISS = "ai-engine", "https://issuer.test"
PREFIX = f"aie-test-shm-{os.getpid()}-"   # every object this module creates; counted by the leak test
MAX_REGIONS = 8
MAX_BYTES = 64 << 20
# The dtypes model: one input and one output per dtype, odd widths.
DT_INPUTS = {"a": ("FP32", np.float32, 5), "b": ("INT32", np.int32, 3), "c": ("UINT8", np.uint8, 7),
             "d": ("INT64", np.int64, 2)}
DT_OUTPUTS = {"a2": ("FP32", np.float32, 5), "b2": ("INT32", np.int32, 3), "cf": ("FP32", np.float32, 7),
              "dn": ("INT64", np.int64, 2)}


def _dtypes_model(path) -> None:
    nodes = [h.make_node("Mul", ["a", "two"], ["a2"]), h.make_node("Add", ["b", "b"], ["b2"]),
             h.make_node("Cast", ["c"], ["cf"], to=T.FLOAT), h.make_node("Neg", ["d"], ["dn"])]
    onnx_type = {"FP32": T.FLOAT, "INT32": T.INT32, "UINT8": T.UINT8, "INT64": T.INT64}
    graph = h.make_graph(
        nodes, "dtypes",
        [h.make_tensor_value_info(n, onnx_type[t], ["N", w]) for n, (t, _, w) in DT_INPUTS.items()],
        [h.make_tensor_value_info(n, onnx_type[t], ["N", w]) for n, (t, _, w) in DT_OUTPUTS.items()],
        [h.make_tensor("two", T.FLOAT, [], [2.0])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))


def token(secret: bytes, subject: str, scope: str = "infer") -> str:
    now = int(time.time())
    return jwt.encode({"sub": subject, "aud": AUD, "iss": ISS, "iat": now, "exp": now + 600, "scope": scope},
                      secret, algorithm="HS256")


@pytest.fixture(scope="module")
def env(module_serve_factory, zoo_mlp, tmp_path_factory):
    from engine.convert import convert_file

    d = tmp_path_factory.mktemp("shm")
    _dtypes_model(d / "dtypes.onnx")
    convert_file(d / "dtypes.onnx", d / "dtypes.aie")
    secret = b"shm-" + uuid.uuid4().hex.encode()
    (d / "secret").write_bytes(secret)
    server = module_serve_factory(
        [{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8},
         {"name": "dtypes", "path": str(d / "dtypes.aie"), "max_batch_size": 4}],
        auth={"enabled": True, "algorithms": ["HS256"], "secret_file": str(d / "secret"), "audience": AUD,
              "issuer": ISS},
        limits={"max_shm_regions": MAX_REGIONS, "max_shm_bytes": MAX_BYTES})
    alice = {"Authorization": f"Bearer {token(secret, 'alice')}"}
    bob = {"Authorization": f"Bearer {token(secret, 'bob')}"}
    reader = {"Authorization": f"Bearer {token(secret, 'carol', 'read')}"}
    client = httpclient.InferenceServerClient(url=server.url)
    yield {"server": server, "client": client, "alice": alice, "bob": bob, "reader": reader,
           "session": zoo_mlp.session(), "dtypes": str(d / "dtypes.aie")}
    client.close()  # its sockets, now rather than when a later module's test collects garbage


@pytest.fixture
def regions(env):
    """tritonclient handles made by a test, destroyed (and alice's and bob's
    registrations dropped) at its end, so each test starts with none."""
    made = []

    def create(name: str, size: int):
        handle = shm.create_shared_memory_region(name, "/" + PREFIX + uuid.uuid4().hex[:12], size)
        made.append(handle)
        return handle

    yield create
    for who in ("alice", "bob"):
        env["client"].unregister_system_shared_memory(headers=dict(env[who]))
    for handle in made:
        shm.destroy_shared_memory_region(handle)


# Headers go as a copy each call: tritonclient's infer() adds
# Inference-Header-Content-Length to the dict it is given, and a stale one
# would split the next request's body.


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(InferenceServerException) as info:
        fn(*args, **kwargs)
    return str(info.value)


def mlp_infer_ok(env) -> None:
    """A plain request: the server still serves."""
    x = np.linspace(-1, 1, 784, dtype=np.float32)[None]
    inp = httpclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(x)
    got = env["client"].infer("mlp", [inp], headers=dict(env["alice"])).as_numpy("logits")
    np.testing.assert_allclose(got, env["session"].run(None, {"input": x})[0], rtol=1e-5, atol=1e-5)


def _key(handle) -> str:
    return handle._shm_key


# ---- through tritonclient ------------------------------------------------------
def test_extension_listed(env):
    assert "system_shared_memory" in env["client"].get_server_metadata(headers=dict(env["alice"]))["extensions"]


@pytest.mark.parametrize("batch", [1, 3])
def test_dtypes_in_and_out_of_regions_equal_plain_path(env, regions, batch):
    client, alice = env["client"], env["alice"]
    rng = np.random.default_rng(batch)
    feeds = {"a": rng.standard_normal((batch, 5)).astype(np.float32),
             "b": rng.integers(-1000, 1000, (batch, 3), dtype=np.int32),
             "c": rng.integers(0, 256, (batch, 7), dtype=np.uint8),
             "d": rng.integers(-2**40, 2**40, (batch, 2), dtype=np.int64)}
    # Inputs packed back to back at odd offsets (UINT8 first: the others start unaligned by 7 * batch
    # bytes, except where that is a multiple of their size) in one region; outputs in another.
    order = ["c", "a", "b", "d"]
    offsets, at = {}, 3
    for n in order:
        offsets[n] = at
        at += feeds[n].nbytes
    inr = regions("in", at)
    for n in order:
        shm.set_shared_memory_region(inr, [feeds[n]], offset=offsets[n])
    client.register_system_shared_memory("in", _key(inr), at, headers=dict(alice))
    out_sizes = {n: batch * w * np.dtype(t).itemsize for n, (_, t, w) in DT_OUTPUTS.items()}
    out_offsets, at = {}, 8
    for n, size in out_sizes.items():
        out_offsets[n] = at
        at += size
    outr = regions("out", at + 8)
    client.register_system_shared_memory("out", _key(outr), at + 8, headers=dict(alice))

    inputs = []
    for n in order:
        inp = httpclient.InferInput(n, [batch, DT_INPUTS[n][2]], DT_INPUTS[n][0])
        inp.set_shared_memory("in", feeds[n].nbytes, offset=offsets[n])
        inputs.append(inp)
    outputs = []
    for n in DT_OUTPUTS:
        o = httpclient.InferRequestedOutput(n)
        o.set_shared_memory("out", out_sizes[n], offset=out_offsets[n])
        outputs.append(o)
    result = client.infer("dtypes", inputs, outputs=outputs, headers=dict(alice))

    plain_inputs = []
    for n in order:
        inp = httpclient.InferInput(n, [batch, DT_INPUTS[n][2]], DT_INPUTS[n][0])
        inp.set_data_from_numpy(feeds[n])
        plain_inputs.append(inp)
    plain = client.infer("dtypes", plain_inputs, headers=dict(alice))
    for n, (datatype, dtype, width) in DT_OUTPUTS.items():
        entry = result.get_output(n)
        assert "data" not in entry
        assert entry["datatype"] == datatype and entry["shape"] == [batch, width]
        assert entry["parameters"] == {"shared_memory_region": "out", "shared_memory_byte_size": out_sizes[n],
                                       "shared_memory_offset": out_offsets[n]}
        got = shm.get_contents_as_numpy(outr, dtype, [batch, width], offset=out_offsets[n])
        np.testing.assert_array_equal(got, plain.as_numpy(n))
    np.testing.assert_array_equal(plain.as_numpy("a2"), feeds["a"] * 2)
    np.testing.assert_array_equal(plain.as_numpy("dn"), -feeds["d"])


def test_mlp_region_in_and_out_and_mixed(env, regions):
    """The zoo MLP: input and output in one region (the run writes the
    output there); then the input in a region and the output in the body."""
    client, alice, session = env["client"], env["alice"], env["session"]
    rng = np.random.default_rng(5)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        r = regions(f"mlp{batch}", x.nbytes + batch * 40)
        shm.set_shared_memory_region(r, [x])
        client.register_system_shared_memory(f"mlp{batch}", _key(r), x.nbytes + batch * 40, headers=dict(alice))
        inp = httpclient.InferInput("input", [batch, 784], "FP32")
        inp.set_shared_memory(f"mlp{batch}", x.nbytes)
        out = httpclient.InferRequestedOutput("logits")
        out.set_shared_memory(f"mlp{batch}", batch * 40, offset=x.nbytes)
        client.infer("mlp", [inp], outputs=[out], headers=dict(alice))
        want = session.run(None, {"input": x})[0]
        np.testing.assert_allclose(shm.get_contents_as_numpy(r, np.float32, [batch, 10], offset=x.nbytes), want,
                                   rtol=1e-5, atol=1e-5)
        body = client.infer("mlp", [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=True)],
                            headers=dict(alice))
        np.testing.assert_allclose(body.as_numpy("logits"), want, rtol=1e-5, atol=1e-5)


def test_status_register_unregister(env, regions):
    client, alice = env["client"], env["alice"]
    r = regions("s1", 4096)
    client.register_system_shared_memory("s1", _key(r), 1000, offset=24, headers=dict(alice))
    assert client.get_system_shared_memory_status(headers=dict(alice)) == [
        {"name": "s1", "key": _key(r), "offset": 24, "byte_size": 1000}]
    assert client.get_system_shared_memory_status("s1", headers=dict(alice))[0]["byte_size"] == 1000
    client.unregister_system_shared_memory("s1", headers=dict(alice))
    client.unregister_system_shared_memory("s1", headers=dict(alice))  # idempotent, as Triton
    assert client.get_system_shared_memory_status(headers=dict(alice)) == []
    assert "'s1' is not registered" in error_of(client.get_system_shared_memory_status, "s1", headers=dict(alice))


def test_every_misuse_is_a_specific_400_and_serving_goes_on(env, regions):
    client, alice = env["client"], env["alice"]
    r = regions("m", 4096)
    client.register_system_shared_memory("m", _key(r), 4096, headers=dict(alice))
    cases = [
        (client.register_system_shared_memory, ("m", _key(r), 16), "'m' is already registered"),
        (client.register_system_shared_memory, ("m2", "/" + PREFIX + "absent", 16), "no such shared memory object"),
        (client.register_system_shared_memory, ("m2", _key(r), 4000, 100),
         "offset 100 + byte_size 4000 = 4100 is beyond the 4096-byte object"),
        (client.register_system_shared_memory, ("m2", "no-slash", 16), 'must start with "/"'),
        (client.register_system_shared_memory, ("m2", "/../etc/passwd", 16), 'without "/", ".."'),
        (client.register_system_shared_memory, ("m2", "/" + "k" * 300, 16), "at most 255 bytes"),
        (client.register_system_shared_memory, ("m2", _key(r), 0), '"byte_size" must be an integer >= 1'),
    ]
    for fn, args, expected in cases:
        assert expected in error_of(fn, *args, headers=dict(alice))
        mlp_infer_ok(env)

    def infer(region, size, offset=0, out=None, shape=(1, 784)):
        inp = httpclient.InferInput("input", list(shape), "FP32")
        inp.set_shared_memory(region, size, offset=offset)
        outs = None
        if out is not None:
            outs = [httpclient.InferRequestedOutput("logits")]
            outs[0].set_shared_memory(*out)
        return error_of(client.infer, "mlp", [inp], outputs=outs, headers=dict(alice))

    assert "input 'input': shared memory region 'nope' is not registered" in infer("nope", 3136)
    mlp_infer_ok(env)
    assert ("shared_memory_offset 1000 + shared_memory_byte_size 3136 = 4136 is beyond region 'm' of 4096 bytes"
            in infer("m", 3136, offset=1000))
    mlp_infer_ok(env)
    assert "shared_memory_byte_size 3000 but shape [1, 784] of FP32 needs 3136 bytes" in infer("m", 3000)
    mlp_infer_ok(env)
    # An output region too small is refused before the request runs: no execution counted.
    before = client.get_inference_statistics("mlp", headers=dict(alice))["model_stats"][0]["execution_count"]
    assert ("output 'logits' of 40 bytes does not fit shared_memory_byte_size 36 in region 'm'"
            in infer("m", 3136, out=("m", 36, 3136)))
    assert client.get_inference_statistics("mlp", headers=dict(alice))["model_stats"][0]["execution_count"] == before
    assert "is beyond region 'm'" in infer("m", 3136, out=("m", 40, 4090))
    assert "is not registered" in infer("m", 3136, out=("gone", 40))
    mlp_infer_ok(env)
    # Data and a region for one input: refused.
    body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0.0] * 784,
                                   "parameters": {"shared_memory_region": "m", "shared_memory_byte_size": 3136}}]})
    status, answer, _ = env["server"].post("/v2/models/mlp/infer", body.encode(), alice)
    assert status == 400 and "shared_memory_region given with data" in json.loads(answer)["error"]
    mlp_infer_ok(env)


def test_region_limits(env, regions):
    client, alice, bob = env["client"], env["alice"], env["bob"]
    big = regions("big", MAX_BYTES + 4096)  # tmpfs: sparse, costs no memory
    assert f"over limits.max_shm_bytes {MAX_BYTES}" in error_of(
        client.register_system_shared_memory, "big", _key(big), MAX_BYTES + 1, headers=dict(alice))
    small = regions("small", 4096)
    for i in range(MAX_REGIONS // 2):  # the limit is server-wide: both principals count
        client.register_system_shared_memory(f"r{i}", _key(small), 4096, headers=dict(alice))
        client.register_system_shared_memory(f"r{i}", _key(small), 4096, headers=dict(bob))
    assert "the most limits.max_shm_regions allows" in error_of(
        client.register_system_shared_memory, "one-more", _key(small), 16, headers=dict(alice))
    client.unregister_system_shared_memory(headers=dict(bob))
    client.register_system_shared_memory("one-more", _key(small), 16, headers=dict(alice))
    mlp_infer_ok(env)


def test_object_deleted_or_shrunk_while_registered(env, regions):
    """Deleted (shm_unlink): the server's mapping keeps the memory, the
    region keeps working. Shrunk (ftruncate): refused at its next use."""
    client, alice, session = env["client"], env["alice"], env["session"]
    x = np.random.default_rng(8).standard_normal((1, 784)).astype(np.float32)
    r = regions("del", 8192)
    shm.set_shared_memory_region(r, [x])
    client.register_system_shared_memory("del", _key(r), 8192, headers=dict(alice))
    os.unlink("/dev/shm/" + _key(r)[1:])  # as shm_unlink; the handle's own mapping stays
    inp = httpclient.InferInput("input", [1, 784], "FP32")
    inp.set_shared_memory("del", x.nbytes)
    out = httpclient.InferRequestedOutput("logits")
    out.set_shared_memory("del", 40, offset=4096)
    client.infer("mlp", [inp], outputs=[out], headers=dict(alice))
    np.testing.assert_allclose(shm.get_contents_as_numpy(r, np.float32, [1, 10], offset=4096),
                               session.run(None, {"input": x})[0], rtol=1e-5, atol=1e-5)
    client.unregister_system_shared_memory("del", headers=dict(alice))
    r._mpsm_handle.unlink = lambda: None  # already deleted: the fixture's destroy must not unlink again

    s = regions("shrink", 8192)
    client.register_system_shared_memory("shrink", _key(s), 8192, headers=dict(alice))
    fd = os.open("/dev/shm/" + _key(s)[1:], os.O_RDWR)
    try:
        os.ftruncate(fd, 4096)
    finally:
        os.close(fd)
    inp.set_shared_memory("shrink", x.nbytes)
    assert "shrank to 4096 bytes, below the region's end at 8192" in error_of(
        client.infer, "mlp", [inp], headers=dict(alice))
    mlp_infer_ok(env)


def test_auth_on_the_routes_and_regions_per_principal(env, regions):
    client, alice, bob, server = env["client"], env["alice"], env["bob"], env["server"]
    r = regions("mine", 4096)
    for path, body in (("/v2/systemsharedmemory/status", None), ("/v2/systemsharedmemory/unregister", b""),
                       ("/v2/systemsharedmemory/region/x/register", b"{}")):
        status = server.get(path)[0] if body is None else server.post(path, body)[0]
        assert status == 401, path
    assert "lacks an 'infer' scope" in error_of(client.get_system_shared_memory_status, headers=dict(env["reader"]))
    client.register_system_shared_memory("mine", _key(r), 4096, headers=dict(alice))
    # bob neither sees, uses nor unregisters alice's region; his own of the same name is his
    assert client.get_system_shared_memory_status(headers=dict(bob)) == []
    inp = httpclient.InferInput("input", [1, 784], "FP32")
    inp.set_shared_memory("mine", 3136)
    assert "'mine' is not registered" in error_of(client.infer, "mlp", [inp], headers=dict(bob))
    client.unregister_system_shared_memory("mine", headers=dict(bob))
    assert [s["name"] for s in client.get_system_shared_memory_status(headers=dict(alice))] == ["mine"]
    client.register_system_shared_memory("mine", _key(r), 1024, headers=dict(bob))
    assert client.get_system_shared_memory_status("mine", headers=dict(bob))[0]["byte_size"] == 1024
    assert client.get_system_shared_memory_status("mine", headers=dict(alice))[0]["byte_size"] == 4096


def _fds_maps(pid: int) -> tuple[int, int, int]:
    """(open fds, mappings of /dev/shm objects, all mappings) of a process."""
    with open(f"/proc/{pid}/maps") as f:
        maps = f.readlines()
    return len(os.listdir(f"/proc/{pid}/fd")), sum("/dev/shm/" in m for m in maps), len(maps)


def test_no_leak_after_1000_register_unregister_cycles(env, regions):
    server, alice = env["server"], env["alice"]
    r = regions("cycle", 4096)
    x = np.ones((1, 784), np.float32)
    shm.set_shared_memory_region(r, [x])
    register = json.dumps({"key": _key(r), "offset": 0, "byte_size": 4096}).encode()
    infer = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "parameters": {
        "shared_memory_region": "cycle", "shared_memory_byte_size": 3136}}]}).encode()
    host, port = server.url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)

    def call(path: str, body: bytes = b"") -> None:
        conn.request("POST", path, body, alice)
        answer = conn.getresponse()
        data = answer.read()
        assert answer.status == 200, data

    def cycles(n: int) -> None:
        for i in range(n):
            call("/v2/systemsharedmemory/region/cycle/register", register)
            if i % 100 == 0:  # a region used by a request unmaps as well
                call("/v2/models/mlp/infer", infer)
            call("/v2/systemsharedmemory/region/cycle/unregister")

    pid = server.proc.pid
    cycles(20)  # the connection, its buffers and the code paths exist before the baseline
    before = _fds_maps(pid), sorted(e for e in os.listdir("/dev/shm") if e.startswith(PREFIX))
    t0 = time.monotonic()
    cycles(1000)
    elapsed = time.monotonic() - t0
    after = _fds_maps(pid), sorted(e for e in os.listdir("/dev/shm") if e.startswith(PREFIX))
    # fds, shared-memory mappings and objects exactly as before; all mappings
    # within a few, as the allocators' own arenas come and go (a leak of one
    # mapping per hundred cycles would still show).
    (fds, shm_maps, maps), objects = before
    assert (after[0][:2], after[1]) == ((fds, shm_maps), objects), f"{before} -> {after}"
    assert abs(after[0][2] - maps) <= 4, f"mappings {maps} -> {after[0][2]}"
    # ... and the counts do see a registered region: one descriptor, one mapping
    call("/v2/systemsharedmemory/region/cycle/register", register)
    assert _fds_maps(pid)[:2] == (fds + 1, shm_maps + 1)
    call("/v2/systemsharedmemory/region/cycle/unregister")
    assert _fds_maps(pid)[:2] == (fds, shm_maps)
    conn.close()
    assert elapsed < 60, f"1000 cycles took {elapsed:.1f} s"


# ---- the run writes straight into a request's arrays ---------------------------------
class _Req:
    """The fields engine.server.runner reads from a scheduler request."""

    def __init__(self, inputs: dict, batch: int, out: dict | None = None):
        self.inputs, self.batch, self.out = inputs, batch, out


def test_runner_writes_outputs_into_the_requests_arrays(zoo_mlp):
    import asyncio

    from engine.server.runner import InstanceRunner

    session = zoo_mlp.session()

    class Model:
        outputs = session.get_outputs()

    rng = np.random.default_rng(4)
    x, y = zoo_mlp.inputs(rng, 2), zoo_mlp.inputs(rng, 1)
    want_x, want_y = session.run(None, {"input": x})[0], session.run(None, {"input": y})[0]

    async def main():
        runner = InstanceRunner(asyncio.get_running_loop())
        try:
            # alone: the output is the given array, written by the run
            dest = np.full((2, 10), np.nan, np.float32)
            [out], *_ = await runner.run(session, Model, [_Req({"input": x}, 2, {"logits": dest})])
            assert out["logits"] is dest
            np.testing.assert_array_equal(dest, want_x)
            # an array that is not exactly the output (shape, contiguity): the run writes its own
            for bad in (np.empty((3, 10), np.float32), np.empty((2, 20), np.float32)[:, ::2]):
                [out], *_ = await runner.run(session, Model, [_Req({"input": x}, 2, {"logits": bad})])
                assert out["logits"] is not bad
                np.testing.assert_array_equal(out["logits"], want_x)
            # in a batch of two requests: split from the batch's output, the arrays untouched
            d1, d2 = np.zeros((2, 10), np.float32), np.zeros((1, 10), np.float32)
            outs, *_ = await runner.run(session, Model, [_Req({"input": x}, 2, {"logits": d1}),
                                                          _Req({"input": y}, 1, {"logits": d2})])
            np.testing.assert_array_equal(outs[0]["logits"], want_x)
            np.testing.assert_array_equal(outs[1]["logits"], want_y)
            assert not d1.any() and not d2.any()
        finally:
            runner.close()

    asyncio.run(main())


# ---- the registry's checks, without a server --------------------------------------
@pytest.fixture
def objects():
    """Shared-memory objects made with os.open in /dev/shm, as shm_open does."""
    made = []

    def create(size: int) -> tuple[str, mmap.mmap]:
        key = "/" + PREFIX + uuid.uuid4().hex[:12]
        fd = os.open("/dev/shm/" + key[1:], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            m = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        made.append((key, m))
        return key, m

    yield create
    for key, m in made:
        m.close()
        try:
            os.unlink("/dev/shm/" + key[1:])
        except FileNotFoundError:
            pass


def registry(**limits) -> SystemSharedMemory:
    config = LimitsConfig(**limits)
    return SystemSharedMemory(lambda: config)


@pytest.mark.parametrize("key, expected", [
    ("name", 'must start with "/"'), ("/", 'must start with "/"'), ("/a/b", 'without "/"'),
    ("/..", 'without "/", ".."'), ("/a..b", '".."'), ("/a\0b", "NUL"), ("/" + "x" * 256, "at most 255 bytes"),
    (7, "must be a string"),
])
def test_bad_keys(key, expected):
    with pytest.raises(ServeError, match=expected):
        check_key(key)


def test_key_forms_accepted():
    for key in ("/a", "/psm_1f2e", "/" + "x" * 255, "/a.b-c_d"):
        assert check_key(key) == key


def test_registry_views_copies_and_writes(objects):
    key, client = objects(3 * 4096)
    reg = registry()
    reg.register("r", key, 4100, 8000)  # not page-aligned: mapped from the page below
    assert reg.status(None) == [{"name": "r", "key": key, "offset": 4100, "byte_size": 8000}]
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    client[4100 + 16:4100 + 16 + a.nbytes] = a.tobytes()
    params = {"shared_memory_region": "r", "shared_memory_offset": 16, "shared_memory_byte_size": a.nbytes}
    view = reg.read_input("x", params, "FP32", [2, 3])
    np.testing.assert_array_equal(view, a)
    client[4100 + 16:4100 + 20] = np.float32(42).tobytes()
    assert view[0, 0] == 42  # a view on the mapping, not a copy
    odd = reg.read_input("x", {**params, "shared_memory_offset": 17, "shared_memory_byte_size": 4}, "FP32", [1])
    assert odd.flags.aligned and odd.flags.owndata  # unaligned for float32: copied
    assert reg.read_input("x", {}, "FP32", [2, 3]) is None

    target = reg.output_target("y", {"shared_memory_region": "r", "shared_memory_offset": 64,
                                     "shared_memory_byte_size": 24})
    out = target.array([2, 3], np.dtype(np.float32))
    out[...] = 7  # what a run writing into the view does
    reg.write_output(target, out)  # the same memory: nothing to copy
    reg.write_output(target, a)     # another array: copied in
    np.testing.assert_array_equal(np.frombuffer(client, np.float32, 6, 4100 + 64), a.ravel())
    with pytest.raises(ServeError, match="output 'y' of 28 bytes does not fit shared_memory_byte_size 24"):
        reg.write_output(target, np.zeros(7, np.float32))
    with pytest.raises(ServeError, match="without shared_memory_region"):
        reg.read_input("x", {"shared_memory_byte_size": 4}, "FP32", [1])
    with pytest.raises(ServeError, match="needs shared_memory_byte_size"):
        reg.read_input("x", {"shared_memory_region": "r"}, "FP32", [1])
    with pytest.raises(ServeError, match="shared_memory_offset must be an integer >= 0"):
        reg.read_input("x", {**params, "shared_memory_offset": -4}, "FP32", [2, 3])

    # Unregistered while a request holds a view: the mapping stays until the view goes.
    reg.unregister("r")
    assert view[0, 0] == 42
    with pytest.raises(ServeError, match="was unregistered while the request ran"):
        reg.write_output(target, a)
    del view, out
    reg.close()


def test_registry_limits_and_off(objects):
    key, _ = objects(8192)
    reg = registry(max_shm_regions=2, max_shm_bytes=8192)
    reg.register("a", key, 0, 4096)
    with pytest.raises(ServeError, match="over limits.max_shm_bytes 8192"):
        reg.register("b", key, 0, 4097)
    reg.register("b", key, 0, 4096)
    with pytest.raises(ServeError, match="holds 2 regions"):
        reg.register("c", key, 0, 1)
    reg.unregister(None)
    reg.register("c", key, 0, 8192)
    with pytest.raises(ServeError, match="would map 8193"):  # the byte limit counts every owner's
        reg.register("a", key, 0, 1, owner="other")
    reg.unregister("c", owner="other")  # another owner's name: nothing
    assert reg.status(None) == [{"name": "c", "key": key, "offset": 0, "byte_size": 8192}]
    reg.close()
    assert reg.status(None) == [] and reg.status(None, owner="other") == []
    off = registry(max_shm_regions=0)
    assert not off.enabled
    with pytest.raises(ServeError, match="turned off"):
        off.register("a", key, 0, 1)


def test_registry_refuses_what_is_not_an_object(tmp_path, objects):
    reg = registry()
    link = "/" + PREFIX + "link"
    key, _ = objects(4096)
    os.symlink("/dev/shm/" + key[1:], "/dev/shm/" + link[1:])
    try:
        with pytest.raises(ServeError, match="symbolic link"):
            reg.register("l", link, 0, 16)
    finally:
        os.unlink("/dev/shm/" + link[1:])
    fifo = "/" + PREFIX + "fifo"
    os.mkfifo("/dev/shm/" + fifo[1:])
    try:
        with pytest.raises(ServeError, match="is not a shared memory object"):
            reg.register("f", fifo, 0, 16)
    finally:
        os.unlink("/dev/shm/" + fifo[1:])
    assert reg.status(None) == []
