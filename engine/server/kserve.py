"""KServe v2 / Open Inference Protocol routes, as Triton serves them, so
tritonclient and other existing clients work unchanged.

Infer bodies are JSON, or JSON followed by raw tensor bytes (the binary
tensor extension: `Inference-Header-Content-Length` gives the JSON's length,
each binary input carries `parameters.binary_data_size`, outputs are returned
binary when asked per output (`binary_data`) or per request
(`binary_data_output`)). Errors are {"error": "..."} with the status code.

System shared memory (engine.server.shm): the /v2/systemsharedmemory
routes register, unregister and report regions; an input whose parameters
name a region is read from it (a view: no copy), a requested output that
names one is checked against it before the request is queued and written
into it (by the run itself where the batch is this request alone), and is
answered without data, its shared-memory parameters echoed.

Status codes: 400 bad input, 401/403 auth, 404 unknown model/route,
429 queue full or rate limited (Retry-After), 503 draining or unloading,
504 deadline passed before the request ran, 500 the model failed.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import unquote

import numpy as np

from engine import __version__
from engine.runtime import kernel_isa
from engine.server import jsoncodec
from engine.server.batching import AUTO_CAP_S
from engine.server.config import NAME_PATTERN
from engine.server.http import Request, parse_length
from engine.server.models import KSERVE_TO_NUMPY, NUMPY_TO_KSERVE, LoadedModel, element_count
from engine.server.errors import ServeError
from engine.server.shm import OutputTarget, SystemSharedMemory, output_views
from engine.server.state import ServerState, arena_stats, rss_bytes
from engine.server.timing import clock
from engine.wire import MAX_DIMS

OFFLOAD_BYTES = 64 << 10     # bodies larger than this are (de)coded on the codec pool
_MAX_INT = (1 << 63) - 1     # parameters and dims: what the scheduler and numpy take as int64
EXTENSIONS = ["binary_tensor_data", "statistics", "model_configuration", "schedule_policy"]
SHM_EXTENSION = "system_shared_memory"   # listed while limits.max_shm_regions > 0
# Names as the config allows them: routing is on the raw path, so a
# percent-encoded name ("mlp%2Finfer") matches no route instead of another one.
_MODEL_ROUTE = re.compile(f"^/v2/models/({NAME_PATTERN})(?:/versions/({NAME_PATTERN}))?"
                          r"(/ready|/infer|/stats|/config)?$")
_SHM_ROUTE = re.compile(r"^/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list = field(default_factory=list)


def _json(obj, status: int = 200, headers=()) -> Response:
    return Response(status, jsoncodec.dumps(obj), headers=list(headers))


def error_response(status: int, message: str, headers=()) -> Response:
    return _json({"error": message}, status, headers)


def trace_context(header: str | None) -> tuple[str, str, str | None]:
    """(trace id, our span id, parent span id) from a W3C traceparent, or a new trace."""
    m = _TRACEPARENT.match(header.strip().lower()) if header else None
    if m and m.group(1) != "0" * 32 and m.group(2) != "0" * 16:
        return m.group(1), secrets.token_hex(8), m.group(2)
    ids = secrets.token_hex(24)  # one getrandom call for both ids
    return ids[:32], ids[32:], None


# ---- infer request decoding ------------------------------------------------
def _nested_count(data, name: str) -> tuple[int, object]:
    """(values a nested list holds if it is regular, its first value), read
    along first elements: the size check before numpy converts millions."""
    n, depth = 1, 0
    while isinstance(data, list):
        n *= len(data)
        depth += 1
        if depth > MAX_DIMS:
            raise ServeError(f"input {name!r}: data nests deeper than {MAX_DIMS} lists")
        if not data:
            break
        data = data[0]
    return n, data


def _tensor_from_json(spec_dtype: np.dtype, name: str, datatype: str, shape, data) -> np.ndarray:
    want = KSERVE_TO_NUMPY[datatype]
    n, first = _nested_count(data, name)
    if n != element_count(shape):
        if not isinstance(first, (int, float, list)):
            raise ServeError(f"input {name!r}: data is not a flat or nested list of {datatype} values")
        raise ServeError(f"input {name!r}: {n} values for shape {list(shape)} "
                         f"({element_count(shape)} expected)")
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError, OverflowError):  # lists of unequal lengths, mixed lists and numbers
        raise ServeError(f"input {name!r}: data is ragged (nested lists of unequal lengths) or mixes "
                         "lists and numbers") from None
    kind = arr.dtype.kind
    # JSON numbers arrive as Python ints/floats; refuse values the datatype
    # cannot hold instead of letting numpy wrap or truncate them.
    if want.kind == "b":
        ok = kind == "b"
    elif want.kind in "iu":
        ok = kind in "iu"
    else:
        ok = kind in "iuf"
    if not ok:
        raise ServeError(f"input {name!r}: data is not a flat or nested list of {datatype} values")
    if want.kind in "iu" and arr.size:
        info = np.iinfo(want)
        if arr.min() < info.min or arr.max() > info.max:
            raise ServeError(f"input {name!r}: values outside the {datatype} range")
    if arr.size != element_count(shape):
        raise ServeError(f"input {name!r}: {arr.size} values for shape {list(shape)} "
                         f"({element_count(shape)} expected)")
    return _reshape(arr.astype(want, copy=False), name, shape)


def _reshape(arr: np.ndarray, name: str, shape) -> np.ndarray:
    try:
        return arr.reshape(shape)
    except ValueError as exc:  # an empty tensor with dims numpy cannot hold ("array is too big")
        raise ServeError(f"input {name!r}: shape {str(shape)[:100]}: {exc}") from None


def decode_infer(body: bytes, header_length: str | None, model: LoadedModel, max_json_elements: int,
                 shm: SystemSharedMemory | None = None, owner: str = ""):
    """Body -> (inputs, requested outputs, request parameters, id). A
    requested output maps to True (binary), False (JSON data) or, with
    `shm` (the server's regions, `owner`'s namespace), the OutputTarget
    of a region it goes to."""
    if header_length is not None:
        split = parse_length(header_length)
        if split is None or split > len(body):
            raise ServeError(f"Inference-Header-Content-Length {header_length[:32]!r} is not a length "
                             f"within the {len(body)}-byte body (1-18 ASCII digits)")
    else:
        split = len(body)
    text = memoryview(body)[:split]
    try:
        if split > OFFLOAD_BYTES:  # smaller ones cannot hold enough to matter
            jsoncodec.check_structure(text, max_json_elements)
        doc = jsoncodec.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServeError(f"request JSON is malformed: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise ServeError('request must be a JSON object with an "inputs" list')
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise ServeError('"parameters" must be an object')
    binary = memoryview(body)[split:]
    offset = 0
    inputs: dict[str, np.ndarray] = {}
    for i, item in enumerate(doc["inputs"]):
        if not isinstance(item, dict):
            raise ServeError(f"inputs[{i}] must be an object")
        name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
        if not isinstance(name, str):
            raise ServeError(f"inputs[{i}] needs a string \"name\"")
        if name in inputs:
            raise ServeError(f"input {name!r} given twice")
        spec = model.input_spec(name)  # a 400 naming what the model expects
        if not isinstance(datatype, str) or datatype not in KSERVE_TO_NUMPY:
            raise ServeError(f"input {name!r}: datatype {datatype!r} unsupported; model expects {spec.datatype}")
        if datatype != spec.datatype:
            raise ServeError(f"input {name!r} has datatype {datatype}, model {model.name!r} expects "
                             f"{spec.datatype}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_INT
                                                   for d in shape):
            raise ServeError(f"input {name!r}: shape must be a list of non-negative integers, got "
                             f"{str(shape)[:100]}")
        if len(shape) > MAX_DIMS:
            raise ServeError(f"input {name!r}: shape has {len(shape)} dims, at most {MAX_DIMS} are supported")
        iparams = item.get("parameters") or {}
        size = iparams.get("binary_data_size") if isinstance(iparams, dict) else None
        if shm is not None and isinstance(iparams, dict) and (
                arr := shm.read_input(name, iparams, datatype, shape, owner=owner)) is not None:
            if size is not None or "data" in item:
                raise ServeError(f"input {name!r}: shared_memory_region given with data or binary_data_size")
            inputs[name] = arr
        elif size is not None:
            dtype = KSERVE_TO_NUMPY[datatype]
            need = element_count(shape) * dtype.itemsize
            if not isinstance(size, int) or size != need:
                raise ServeError(f"input {name!r}: binary_data_size {size!r} but shape {shape} of {datatype} "
                                 f"needs {need} bytes")
            if offset + size > len(binary):
                raise ServeError(f"input {name!r}: body ends before its {size} binary bytes")
            # A view into the body: no copy (batching concatenates anyway).
            inputs[name] = _reshape(np.frombuffer(binary[offset:offset + size], dtype=dtype.newbyteorder("<")),
                                    name, shape)
            offset += size
        elif "data" in item:
            inputs[name] = _tensor_from_json(spec.dtype, name, datatype, shape, item["data"])
        else:
            raise ServeError(f"input {name!r} has neither \"data\" nor parameters.binary_data_size")
    if offset != len(binary):
        raise ServeError(f"{len(binary) - offset} bytes of binary data not claimed by any input")
    default_binary = bool(params.get("binary_data_output", False))
    requested: dict[str, bool] = {}
    outputs = doc.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise ServeError('"outputs" must be a list')
        for i, item in enumerate(outputs):
            name = item.get("name") if isinstance(item, dict) else None
            if model.output(name) is None:
                raise ServeError(f"outputs[{i}]: model {model.name!r} has no output {name!r}; it has "
                                 + ", ".join(t.name for t in model.outputs))
            oparams = item.get("parameters") or {}
            if not isinstance(oparams, dict):
                raise ServeError(f"outputs[{i}].parameters must be an object")
            target = shm.output_target(name, oparams, owner=owner) if shm is not None else None
            requested[name] = target or bool(oparams.get("binary_data", default_binary))
    else:
        requested = {t.name: default_binary for t in model.outputs}
    rid = doc.get("id")
    return inputs, requested, params, rid if isinstance(rid, str) else None


def encode_infer(model: LoadedModel, outputs: dict[str, np.ndarray], requested: dict[str, bool | OutputTarget],
                 request_id: str | None) -> Response:
    doc = {"model_name": model.name, "model_version": model.version}
    if request_id is not None:
        doc["id"] = request_id
    tensors, chunks, finite = [], [], True
    for name, binary in requested.items():
        arr = np.ascontiguousarray(outputs[name])
        entry = {"name": name, "datatype": NUMPY_TO_KSERVE[arr.dtype], "shape": list(arr.shape)}
        if isinstance(binary, OutputTarget):  # written into its region by the caller
            entry["parameters"] = binary.params(arr.nbytes)
        elif binary:
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
                finite = False
            entry["data"] = arr.ravel().tolist()
        tensors.append(entry)
    doc["outputs"] = tensors
    head = jsoncodec.dumps(doc, finite=finite)
    if not chunks:
        return Response(200, head)
    return Response(200, b"".join([head, *chunks]), "application/octet-stream",
                    [("Inference-Header-Content-Length", str(len(head)))])


def param_int(params: dict, key: str) -> int | None:
    """A request parameter that must be an int64 (priority, timeout), or None; the same rule over HTTP and gRPC."""
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -_MAX_INT <= value <= _MAX_INT:
        raise ServeError(f"parameter {key!r} must be an integer within int64, got {str(value)[:40]}")
    return value


# ---- routes ------------------------------------------------------------------
def bucket_parameters(model: LoadedModel) -> dict:
    """A bucketed model's buckets in its config, the Triton way: its dims
    keep -1 on the bucketed axes (any size is accepted), and the buckets go
    in the model-level `parameters` map (ModelConfig.parameters, whose
    values are ModelParameter {string_value}: Triton has no field of its
    own for them) as JSON under "shape_buckets"."""
    if model.buckets is None:
        return {}
    value = json.dumps(model.buckets.as_config(), separators=(",", ":"), allow_nan=False)
    return {"parameters": {"shape_buckets": {"string_value": value}}}


class KServeApp:
    def __init__(self, state: ServerState):
        self.state = state

    async def handle(self, req: Request, log: dict) -> Response:
        try:
            return await self._route(req, log)
        except ServeError as exc:
            return error_response(exc.status, exc.message, exc.headers)

    def is_open(self, path: str) -> bool:
        """Paths served without a token: probes and scrapers often cannot carry one."""
        auth = self.state.config.auth
        if path == "/metrics":
            return auth.open_metrics
        return auth.open_health and (path.startswith("/v2/health/") or path == "/health")

    async def _route(self, req: Request, log: dict) -> Response:
        st = self.state
        path, method = req.path, req.method
        # The server authenticates from the head before reading the body.
        principal = req.extra.get("principal")
        if principal is None and not self.is_open(path):
            principal = st.authenticate(req.header("authorization"), req.client.rsplit(":", 1)[0])
        if path == "/v2/health/live":
            return self._only(method, "GET") or Response(200)
        if path == "/v2/health/ready":
            return self._only(method, "GET") or Response(200 if st.registry.ready() and not st.draining else 503)
        if path == "/v2":
            return self._only(method, "GET") or _json({"name": "ai-engine", "version": __version__,
                                                        "extensions": EXTENSIONS + [SHM_EXTENSION] * st.shm.enabled})
        if path == "/health":
            return self._only(method, "GET") or _json(self.health())
        if path == "/metrics":
            return self._only(method, "GET") or Response(
                200, st.metrics.render(queue_depth=st.queue_depth(), load_errors=st.load_errors(),
                                       arena=arena_stats(), uptime_s=time.time() - st.started,
                                       schedulers=st.scheduler_snapshots()).encode(),
                "text/plain; version=0.0.4; charset=utf-8")
        if (m := _SHM_ROUTE.match(path)) is not None:
            return self._shared_memory(req, m, principal)
        if path == "/v2/models/stats":
            return self._only(method, "GET") or _json({"model_stats": [
                st.metrics.stats[n].as_json(n, e.model.version) for n, e in sorted(st.registry.entries.items())
                if e.model]})
        if path == "/v2/repository/index":
            return self._only(method, "POST") or _json([
                {"name": n, "version": e.model.version if e.model else "",
                 "state": "READY" if e.model else "UNAVAILABLE", **({"reason": e.error} if e.error else {})}
                for n, e in sorted(st.registry.entries.items())])
        m = _MODEL_ROUTE.match(path)
        if not m:
            raise ServeError(f"no route for {method} {path}", status=404)
        name, version, action = m.group(1), m.group(2), m.group(3)
        log["model"] = name
        if action == "/infer":
            return self._only(method, "POST") or await self._infer(req, name, version, principal, log)
        if (bad := self._only(method, "GET")) is not None:
            return bad
        if action == "/ready":
            entry = st.registry.get(name)
            ok = entry is not None and entry.model is not None and (not version or version == entry.model.version)
            return Response(200 if ok and not st.draining else 400 if entry is None else 503)
        model = st.model(name, version)
        if action == "/stats":
            return _json({"model_stats": [{**st.metrics.stats[name].as_json(name, model.version),
                                           "plan_builds": model.plan_report()}]})
        if action == "/config":
            return _json(self.model_config(model))
        return _json({"name": model.name, "versions": [model.version], "platform": "ai-engine",
                      "inputs": [t.as_json() for t in model.inputs],
                      "outputs": [t.as_json() for t in model.outputs]})

    @staticmethod
    def _only(method: str, allowed: str) -> Response | None:
        if method == allowed or (allowed == "GET" and method == "HEAD"):
            return None
        return error_response(405, f"method {method} not allowed here; use {allowed}", [("Allow", allowed)])

    def _shared_memory(self, req: Request, m: re.Match, principal) -> Response:
        """Triton's /v2/systemsharedmemory[/region/<name>]/{status,register,unregister}."""
        name, action = (unquote(m.group(1)) if m.group(1) else None), m.group(2)
        shm = self.state.shm
        # A region maps server memory for inferences: only a client that may infer has a use for one.
        if not any(s == "infer" or s.startswith("infer:") for s in principal.scopes):
            raise ServeError("token lacks an 'infer' scope, which shared memory regions need", status=403)
        if action == "status":
            return self._only(req.method, "GET") or _json(shm.status(name, owner=principal.subject))
        if (bad := self._only(req.method, "POST")) is not None:
            return bad
        if action == "unregister":
            shm.unregister(name, owner=principal.subject)
            return Response(200)
        if name is None:
            raise ServeError("register needs a region: POST /v2/systemsharedmemory/region/<name>/register",
                             status=404)
        try:
            doc = jsoncodec.loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ServeError(f"register request JSON is malformed: {exc}") from None
        if not isinstance(doc, dict) or "key" not in doc or "byte_size" not in doc:
            raise ServeError('register needs a JSON object {"key": "/name", "offset": 0, "byte_size": N}')
        shm.register(name, doc["key"], doc.get("offset", 0), doc["byte_size"], owner=principal.subject)
        return Response(200)

    async def _infer(self, req: Request, name: str, version: str | None, principal, log: dict) -> Response:
        st = self.state
        model = st.model(name, version)
        loop = asyncio.get_running_loop()
        header_length = req.header("inference-header-content-length")
        max_elements = st.config.limits.max_json_elements
        args = (req.body, header_length, model, max_elements, st.shm, principal.subject)
        if len(req.body) > OFFLOAD_BYTES:
            inputs, requested, params, rid = await loop.run_in_executor(st.codec_pool, decode_infer, *args)
        else:
            inputs, requested, params, rid = decode_infer(*args)
        targets = {n: t for n, t in requested.items() if isinstance(t, OutputTarget)}
        out = output_views(model, inputs, targets) if targets else None
        model, outputs = await st.infer(name, version, inputs, priority=param_int(params, "priority"),
                                        timeout_us=param_int(params, "timeout"), principal=principal, info=log,
                                        out=out)
        for n, target in targets.items():
            st.shm.write_output(target, outputs[n])
        total = sum(a.nbytes for a in outputs.values())
        if total > OFFLOAD_BYTES and not all(requested.values()):
            resp = await loop.run_in_executor(st.codec_pool, encode_infer, model, outputs, requested, rid)
        else:
            resp = encode_infer(model, outputs, requested, rid)
        log["t_encoded"] = clock()
        return resp

    def model_config(self, model: LoadedModel) -> dict:
        c = model.config
        batch_dim = 1 if model.batchable else 0
        auto = c.max_queue_delay_us is None
        # Triton's key is an integer; the adaptive window reports its cap there and says it adapts.
        dyn = {"max_queue_delay_microseconds": int(AUTO_CAP_S * 1e6) if auto else c.max_queue_delay_us,
               "max_queue_delay_auto": auto,
               "preferred_batch_size": list(c.preferred_batch_sizes),
               "priority_levels": c.priority_levels,
               "default_priority_level": c.default_priority or c.priority_levels,
               "default_queue_policy": {"default_timeout_microseconds": c.default_timeout_us,
                                        "max_queue_size": c.max_queue_size,
                                        "timeout_action": "REJECT", "allow_timeout_override": True}}

        def dims(t):
            return {"name": t.name, "data_type": "TYPE_" + t.datatype, "dims": list(t.shape[batch_dim:])}
        return {"name": model.name, "platform": "ai-engine", "max_batch_size": model.max_batch if model.batchable
                else 0, "input": [dims(t) for t in model.inputs], "output": [dims(t) for t in model.outputs],
                "dynamic_batching": dyn, "instance_group": [{"count": model.placement.instances, "kind": "KIND_CPU"}],
                "precision": model.precision, "kernel_paths": model.kernel_paths, **bucket_parameters(model)}

    def health(self) -> dict:
        st = self.state
        try:
            isa = kernel_isa()
        except Exception:  # noqa: BLE001 - health must answer even without the library
            isa = "unavailable"
        models = {}
        for n, e in sorted(st.registry.entries.items()):
            stats = st.metrics.stats[n]
            models[n] = {"ready": e.model is not None, "version": e.model.version if e.model else None,
                         "queue_length": e.scheduler.queued if e.scheduler else 0,
                         "last_inference_latency_ms": round(stats.last_compute_s * 1e3, 3),
                         "inference_count": stats.inference_count, "execution_count": stats.execution_count,
                         "instances": e.model.placement.instances if e.model else None,
                         "threads_per_instance": e.model.placement.threads if e.model else None,
                         "plan_cache_size": e.model.plan_cache_size if e.model else None,
                         "precision": e.model.precision if e.model else None,
                         "kernel_paths": e.model.kernel_paths if e.model else None,
                         "load_error": e.error,
                         "scheduler": e.scheduler.snapshot() if e.scheduler else None}
        healthy = st.registry.ready() and not any(st.load_errors().values())
        return {"status": "draining" if st.draining else ("ok" if healthy else "degraded"),
                "uptime_s": round(time.time() - st.started, 3), "rss_bytes": rss_bytes(),
                "arena": arena_stats(), "device": "cpu", "kernel_isa": isa, "models": models,
                "reloads": st.metrics.reloads}
