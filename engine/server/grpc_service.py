"""The KServe v2 gRPC front end (`GRPCInferenceService`, as Triton serves
it) on engine.grpc_port, so tritonclient.grpc and other gRPC clients work.

It runs on the server's own event loop (grpc.aio works with uvloop), and
every RPC goes through what HTTP uses: state.authenticate with the
`authorization` metadata (Bearer; its rate limits), state.infer (scheduler,
priorities, deadlines; the client's gRPC deadline bounds the request's), the same ServeError messages (their code from
errors.GRPC_CODES), `traceparent` metadata for the log's trace ids (ours go
back as trailing metadata, with `server-timing` after an inference), the
request log line, aie_requests_total and the phase histograms with
protocol="grpc" (engine.server.timing; grpc's core reads, parses, serialises
and writes the messages out of Python's sight, so network is 0 here and
encode_write ends when the response message is built). Shared-memory
regions (engine.server.shm) as over HTTP, in the principal's namespace. ServerLive/ServerReady are open like /v2/health/* when
auth.open_health is set. Messages larger than limits.max_body are refused by
grpc itself (RESOURCE_EXHAUSTED); a request held counts against
limits.max_buffered_bytes (UNAVAILABLE when over); a connection carries at
most 64 RPCs at once, and is closed after limits.idle_timeout_s idle.
Connections count against limits.max_connections and
max_connections_per_client with HTTP's (engine.server.grpc_connections):
the RPCs of one over a cap get RESOURCE_EXHAUSTED ("too many connections:
..."), not HTTP's 503 (UNAVAILABLE, which a client's retry policy would
retry at once on the same refused connection).

Drain: ServerReady answers false from the moment the drain begins; when the
HTTP listeners close, this server stops taking new RPCs and the ones in
flight (counted in state.in_flight, which the shutdown waits on) finish.
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf import json_format

from engine import __version__
from engine.server.clientlimits import fd_connection_cap
from engine.server.errors import GRPC_CODES, ServeError
from engine.server.grpc_codec import InferRequest, InferResponse, decode_request, encode_response
from engine.server.grpc_connections import GrpcConnections
from engine.server.grpc_stubs import load as load_stubs
from engine.server import timing
from engine.server.kserve import EXTENSIONS, OFFLOAD_BYTES, SHM_EXTENSION, param_int, trace_context
from engine.server.shm import output_views
from engine.server.timing import clock

_OPEN_RPCS = ("ServerLive", "ServerReady")   # as /v2/health/*: open when auth.open_health


def _peer_address(peer: str) -> str:
    """grpc's "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> the address alone."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


def _tls_credentials(tls) -> grpc.ServerCredentials:
    def read(path):
        with open(path, "rb") as f:
            return f.read()
    ca = read(tls.client_ca_file) if tls.client_ca_file else None
    return grpc.ssl_server_credentials([(read(tls.key_file), read(tls.cert_file))], root_certificates=ca,
                                       require_client_auth=ca is not None)


class GrpcFrontend:
    """The grpc.aio server and its servicer; `server` is the engine's Server
    (its state, and connection_idle() to wake the drain when an RPC ends)."""

    def __init__(self, server):
        self.pb2, pb2_grpc, self.mc_pb2 = load_stubs()
        self.engine = server
        self.state = server.state
        limits = self.state.config.limits
        # so_reuseport off: with it, a second engine on the same port would bind silently.
        # Per connection as the binary protocol: at most 64 requests in flight; idle ones closed.
        # Connections: counted in run(); grpc's own cap keeps the refused ones within the open-file limit.
        self.server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                               ("grpc.max_receive_message_length", limits.max_body),
                                               ("grpc.max_send_message_length", -1),
                                               ("grpc.max_concurrent_streams", 64),
                                               ("grpc.max_connection_idle_ms", int(limits.idle_timeout_s * 1000)),
                                               ("grpc.max_allowed_incoming_connections", fd_connection_cap())])
        self.connections = GrpcConnections(self.state.connection_caps)
        _add_servicer(self.pb2, pb2_grpc, _Servicer(self), self.server)
        self.port = None

    async def start(self, host: str, port: int, tls) -> int:
        """Bind and start; the port bound. RuntimeError when it cannot bind."""
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if tls is not None and tls.enabled:
            self.port = self.server.add_secure_port(address, _tls_credentials(tls))
        else:
            self.port = self.server.add_insecure_port(address)
        await self.server.start()
        self.connections.port = self.port
        return self.port

    async def stop(self, grace: float) -> None:
        """Refuse new RPCs; those in flight get `grace` seconds."""
        await self.server.stop(grace)

    # ---- one RPC, the way HTTP answers one request ------------------------
    async def run(self, rpc: str, context, handler):
        """(response or None, status, error message or None) of handler(principal, log)."""
        st = self.state
        t0 = clock()
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        trace_id, span_id, parent = trace_context(metadata.get("traceparent"))
        client = context.peer() or "?"
        # grpc's core reads, deframes and parses the message before the handler runs: the
        # network phase is not visible here (0) and decode starts with the parsed message.
        log: dict = {"t_first": t0, "t_read": t0}
        resp, status, message = None, 200, None
        st.in_flight += 1
        try:
            refused = self.connections.admit(client, st.config.limits)
            if refused is not None:
                raise ServeError(f"too many connections: {refused}", status=429)
            principal = None
            if not (rpc in _OPEN_RPCS and st.config.auth.open_health):
                principal = st.authenticate(metadata.get("authorization"), _peer_address(client))
            resp = await handler(principal, log)
        except ServeError as exc:
            status, message = exc.status, exc.message
        except Exception as exc:  # noqa: BLE001 - no input may crash the server
            st.logger.error("handler_crashed", error=f"{type(exc).__name__}: {exc}", rpc=rpc)
            status, message = 500, f"internal error: {type(exc).__name__}"
        finally:
            st.in_flight -= 1
            self.engine.connection_idle()
        # The answer is serialised and written by grpc after the handler returns: encode_write
        # ends when the response message is built.
        log["t_written"] = written = log.get("t_encoded", clock())
        elapsed = written - t0
        infer = rpc in ("ModelInfer", "ModelStreamInfer")
        spans = None
        if infer or status >= 400:
            model = st.model_label(log["model"]) if "model" in log else ""
            st.metrics.count_request(model if infer else "", "grpc" if infer else "grpc-meta", status, elapsed)
            spans = timing.phases(log) if infer and status == 200 and model else None
            if spans is not None:
                st.metrics.observe_phases(model, "grpc", spans)
            st.logger.info("request", protocol="grpc", trace_id=trace_id, span_id=span_id, parent_id=parent,
                           client=client, method=rpc, model=model or None, batch=log.get("batch"),
                           batch_size=log.get("batch_size"), instance=log.get("instance"),
                           priority=log.get("priority"), status=status, **timing.log_fields(spans),
                           grpc_status=GRPC_CODES.get(status, "INTERNAL") if status >= 400 else "OK",
                           latency_us=int(elapsed * 1e6))
        if rpc != "ModelStreamInfer":
            trailing = [("traceparent", f"00-{trace_id}-{span_id}-01")]
            if spans is not None and (server_timing := timing.server_timing(log)):
                trailing.append(("server-timing", server_timing))
            context.set_trailing_metadata(tuple(trailing))
        return resp, status, message

    async def unary(self, rpc: str, context, handler):
        resp, status, message = await self.run(rpc, context, handler)
        if message is not None:
            await context.abort(grpc.StatusCode[GRPC_CODES.get(status, "INTERNAL")], message)
        return resp

    async def infer(self, received: InferRequest, principal, log: dict, context) -> InferResponse:
        """One ModelInfer; its bytes count against limits.max_buffered_bytes while it is held, as HTTP bodies do."""
        st = self.state
        request = received.message
        name, version = request.model_name, request.model_version or None
        log["model"] = name
        size = received.nbytes
        if not st.buffered.reserve(size, st.config.limits):
            raise ServeError(f"server busy: {st.buffered.used} bytes of requests buffered, a {size}-byte request "
                             f"would exceed limits.max_buffered_bytes ({st.config.limits.max_buffered_bytes})",
                             status=503)
        try:
            return await self._infer(received, name, version, principal, log, context)
        finally:
            st.buffered.release(size)

    async def _infer(self, received: InferRequest, name: str, version: str | None, principal, log: dict,
                     context) -> InferResponse:
        st = self.state
        request = received.message
        model = st.model(name, version)
        owner = principal.subject
        if not received.raw and received.nbytes > OFFLOAD_BYTES:
            # typed contents: a Python value per element; off the loop like HTTP's JSON
            inputs, requested, params = await _in_pool(st, decode_request, request, model, st.shm, owner)
        else:
            inputs, requested, params = decode_request(request, model, st.shm, owner, received.raw)
        # Outputs placed in shared memory: checked before queueing, written by the run where it can (as HTTP).
        targets = {n: t for n, t in requested.items() if t is not None}
        out = output_views(model, inputs, targets) if targets else None
        timeout_us = deadline_us(param_int(params, "timeout"), context.time_remaining(),
                                 st.registry.get(name).scheduler.config.default_timeout_us)
        model, outputs = await st.infer(name, version, inputs, priority=param_int(params, "priority"),
                                        timeout_us=timeout_us, principal=principal, info=log, out=out)
        resp = encode_response(self.pb2, model, outputs, requested, request.id, st.shm)
        log["t_encoded"] = clock()
        return resp

    def model_config(self, model):
        """The ModelConfig proto filled from what /v2/models/<m>/config answers."""
        doc = self.engine.app.model_config(model)
        extra = {k: doc.pop(k) for k in ("precision", "kernel_paths")}
        doc["dynamic_batching"].pop("max_queue_delay_auto")
        config = json_format.ParseDict(doc, self.mc_pb2.ModelConfig())
        for key, value in extra.items():
            config.parameters[key].string_value = value if isinstance(value, str) else ",".join(map(str, value))
        return config


def deadline_us(timeout_us: int | None, remaining_s: float | None, default_us: int = 0) -> int | None:
    """The scheduler's timeout: the request's `timeout` parameter (else the
    model's default), or the client's gRPC deadline when that comes first,
    so a request the client has given up on leaves the queue (504,
    DEADLINE_EXCEEDED) instead of running. A deadline already past is 1 us:
    refused, never "no timeout". A negative parameter is left for the
    scheduler to refuse."""
    if remaining_s is None or (timeout_us is not None and timeout_us < 0):
        return timeout_us
    left = max(1, int(remaining_s * 1e6))
    asked = timeout_us or default_us
    return min(asked, left) if asked else left


def _add_servicer(pb2, pb2_grpc, servicer, server) -> None:
    """The generated registration, with ModelInfer's and ModelStreamInfer's
    requests parsed and responses serialised by engine.server.grpc_codec
    (raw tensors outside protobuf)."""
    class Collect:   # receives what the generated function registers
        def add_generic_rpc_handlers(self, handlers):
            pass

        def add_registered_method_handlers(self, service, handlers):
            self.service, self.handlers = service, handlers

    got = Collect()
    pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, got)
    handlers = dict(got.handlers)
    parse = InferRequest.parser(pb2.ModelInferRequest)
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, request_deserializer=parse,
        response_serializer=InferResponse.serializer(pb2.ModelInferResponse))
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer, request_deserializer=parse,
        response_serializer=pb2.ModelStreamInferResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(got.service, handlers),))
    server.add_registered_method_handlers(got.service, handlers)


async def _in_pool(st, fn, *args):
    return await asyncio.get_running_loop().run_in_executor(st.codec_pool, fn, *args)


class _Servicer:
    """GRPCInferenceService's methods, every one the protocol has."""

    def __init__(self, frontend: GrpcFrontend):
        self.f = frontend
        self.st = frontend.state
        self.pb2 = frontend.pb2

    async def ServerLive(self, request, context):  # noqa: N802 - the protocol's names
        async def h(principal, log):
            return self.pb2.ServerLiveResponse(live=True)
        return await self.f.unary("ServerLive", context, h)

    async def ServerReady(self, request, context):  # noqa: N802
        async def h(principal, log):
            return self.pb2.ServerReadyResponse(ready=self.st.registry.ready() and not self.st.draining)
        return await self.f.unary("ServerReady", context, h)

    async def ModelReady(self, request, context):  # noqa: N802
        async def h(principal, log):
            log["model"] = request.name
            entry = self.st.registry.get(request.name)
            ok = entry is not None and entry.model is not None and (
                not request.version or request.version == entry.model.version)
            return self.pb2.ModelReadyResponse(ready=ok and not self.st.draining)
        return await self.f.unary("ModelReady", context, h)

    async def ServerMetadata(self, request, context):  # noqa: N802
        async def h(principal, log):
            return self.pb2.ServerMetadataResponse(name="ai-engine", version=__version__, extensions=EXTENSIONS + [SHM_EXTENSION] * self.st.shm.enabled)
        return await self.f.unary("ServerMetadata", context, h)

    async def ModelMetadata(self, request, context):  # noqa: N802
        async def h(principal, log):
            log["model"] = request.name
            model = self.st.model(request.name, request.version or None)
            tm = self.pb2.ModelMetadataResponse.TensorMetadata
            return self.pb2.ModelMetadataResponse(
                name=model.name, versions=[model.version], platform="ai-engine",
                inputs=[tm(name=t.name, datatype=t.datatype, shape=t.shape) for t in model.inputs],
                outputs=[tm(name=t.name, datatype=t.datatype, shape=t.shape) for t in model.outputs])
        return await self.f.unary("ModelMetadata", context, h)

    async def ModelConfig(self, request, context):  # noqa: N802
        async def h(principal, log):
            log["model"] = request.name
            model = self.st.model(request.name, request.version or None)
            return self.pb2.ModelConfigResponse(config=self.f.model_config(model))
        return await self.f.unary("ModelConfig", context, h)

    async def ModelStatistics(self, request, context):  # noqa: N802
        async def h(principal, log):
            st = self.st
            if request.name:
                log["model"] = request.name
                model = st.model(request.name, request.version or None)
                docs = [st.metrics.stats[request.name].as_json(request.name, model.version)]
            else:
                docs = [st.metrics.stats[n].as_json(n, e.model.version)
                        for n, e in sorted(st.registry.entries.items()) if e.model]
            return json_format.ParseDict({"model_stats": docs}, self.pb2.ModelStatisticsResponse(),
                                         ignore_unknown_fields=True)
        return await self.f.unary("ModelStatistics", context, h)

    async def RepositoryIndex(self, request, context):  # noqa: N802
        async def h(principal, log):
            index = self.pb2.RepositoryIndexResponse.ModelIndex
            return self.pb2.RepositoryIndexResponse(models=[
                index(name=n, version=e.model.version if e.model else "",
                      state="READY" if e.model else "UNAVAILABLE", reason=e.error or "")
                for n, e in sorted(self.st.registry.entries.items())
                if not request.ready or e.model is not None])
        return await self.f.unary("RepositoryIndex", context, h)

    async def ModelInfer(self, request, context):  # noqa: N802
        async def h(principal, log):
            return await self.f.infer(request, principal, log, context)
        return await self.f.unary("ModelInfer", context, h)

    async def ModelStreamInfer(self, request_iterator, context):  # noqa: N802
        """Each request answered in turn, an error as the message's error_message (as Triton)."""
        async for request in request_iterator:
            async def h(principal, log, request=request):
                return await self.f.infer(request, principal, log, context)
            resp, _, message = await self.f.run("ModelStreamInfer", context, h)
            if message is not None:
                yield self.pb2.ModelStreamInferResponse(error_message=message)
            else:
                yield self.pb2.ModelStreamInferResponse(infer_response=resp.materialize())

    # ---- system shared memory: state.shm (engine.server.shm) --------------

    async def SystemSharedMemoryStatus(self, request, context):  # noqa: N802
        async def h(principal, log):
            resp = self.pb2.SystemSharedMemoryStatusResponse()
            for region in self.st.shm.status(request.name or None, owner=principal.subject):
                resp.regions[region["name"]].CopyFrom(
                    self.pb2.SystemSharedMemoryStatusResponse.RegionStatus(**region))
            return resp
        return await self.f.unary("SystemSharedMemoryStatus", context, h)

    async def SystemSharedMemoryRegister(self, request, context):  # noqa: N802
        async def h(principal, log):
            self.st.shm.register(request.name, request.key, request.offset, request.byte_size,
                                 owner=principal.subject)
            return self.pb2.SystemSharedMemoryRegisterResponse()
        return await self.f.unary("SystemSharedMemoryRegister", context, h)

    async def SystemSharedMemoryUnregister(self, request, context):  # noqa: N802
        async def h(principal, log):
            self.st.shm.unregister(request.name or None, owner=principal.subject)
            return self.pb2.SystemSharedMemoryUnregisterResponse()
        return await self.f.unary("SystemSharedMemoryUnregister", context, h)

    # ---- CUDA shared memory: no CUDA memory is served ---------------------
    async def _no_cuda(self, rpc, context):
        async def h(principal, log):
            raise ServeError("CUDA shared memory is not supported: this server runs on the CPU; use system "
                             "shared memory", status=501)
        return await self.f.unary(rpc, context, h)

    async def CudaSharedMemoryStatus(self, request, context):  # noqa: N802
        return await self._no_cuda("CudaSharedMemoryStatus", context)

    async def CudaSharedMemoryRegister(self, request, context):  # noqa: N802
        return await self._no_cuda("CudaSharedMemoryRegister", context)

    async def CudaSharedMemoryUnregister(self, request, context):  # noqa: N802
        return await self._no_cuda("CudaSharedMemoryUnregister", context)

    # ---- what the engine does not do: models come from engine.yaml (SIGHUP reloads it)
    async def _unimplemented(self, rpc, context, what):
        async def h(principal, log):
            raise ServeError(f"{rpc} is not supported: {what}", status=501)
        return await self.f.unary(rpc, context, h)

    async def RepositoryModelLoad(self, request, context):  # noqa: N802
        return await self._unimplemented("RepositoryModelLoad", context,
                                         "models are loaded from engine.yaml; edit it and send SIGHUP")

    async def RepositoryModelUnload(self, request, context):  # noqa: N802
        return await self._unimplemented("RepositoryModelUnload", context,
                                         "models are unloaded by removing them from engine.yaml and sending SIGHUP")

    async def TraceSetting(self, request, context):  # noqa: N802
        return await self._unimplemented("TraceSetting", context, "trace context comes from traceparent metadata")

    async def LogSettings(self, request, context):  # noqa: N802
        return await self._unimplemented("LogSettings", context, "the log level is engine.log_level (SIGHUP reloads it)")
