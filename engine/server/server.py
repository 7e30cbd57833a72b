"""The server process: startup(), main_loop(), shutdown(), as uvicorn's.

Signals (installed on the event loop; the README's "Signals" section says the same):

  | signal          | effect                                                          | log event          |
  |-----------------|-----------------------------------------------------------------|--------------------|
  | SIGTERM, SIGINT | graceful shutdown in the order below (drain delay, then stop    | shutdown_requested |
  |                 | accepting, answer queued and in-flight requests within          |                    |
  |                 | limits.drain_timeout_s); exit 0, or 1 when some went unanswered |                    |
  | the same again  | while draining: exit at once, status 1                          | forced_exit        |
  | SIGHUP          | re-open the log file, re-read engine.yaml and every model file  | reloaded           |
  |                 | (engine.server.reload); what fails keeps its old version        |                    |
  | SIGUSR2         | re-open the log file only (logrotate's postrotate); no reload   | log_reopened       |
  | SIGPIPE         | ignored (Python's start-up default, kept): a client gone        | -                  |
  |                 | mid-answer is a connection error on that connection only        |                    |

  Any other signal keeps its default action (SIGUSR1, SIGQUIT, ... terminate).
  Why SIGUSR2 re-opens instead of reloading: SIGHUP already reloads (systemd's
  ExecReload sends it), and a reload loads every model again beside the old
  one -- seconds and twice the model memory -- which a nightly logrotate must
  not trigger. Re-opening the log is the one thing that had no signal of its
  own; a reload re-opens it too.

Shutdown order, so that no request is lost:
  1. drain delay (limits.drain_delay_s): readiness answers 503 so load
     balancers stop routing here, while listeners keep accepting and every
     request is served; each response carries `Connection: close` and each
     binary connection gets a GOODBYE frame, so clients move to new
     connections (here, or elsewhere once the balancer noticed).
  2. listeners close; connections opened before the drain are closed where
     they hold no request (none unanswered, no byte of one read). A request
     sent before its client read the GOODBYE may arrive after that close
     (always possible, certain to happen now and then with a delay of 0):
     the server never read it, and engine.client resends it on a new
     connection, which the balancer routes to another host.
  3. connections opened during the delay get their first request answered
     (at most header_timeout_s to send it); requests being read, queued and
     in flight finish (limits.drain_timeout_s for all of it).
  4. the rest of the connections close; models and their threads are released.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import time
import typing

from engine.runtime import set_kernel_threads
from engine.server.binary import BinaryConnection
from engine.server.config import EngineConfig
from engine.server.errors import ServeError
from engine.server.grpc_service import GrpcFrontend
from engine.server.http import ClientGone, read_request, render_response, set_nodelay
from engine.server.kserve import KServeApp, error_response, trace_context
from engine.server.logs import JsonLogger, open_log_dir
from engine.server.reload import reload_config
from engine.server.state import ServerState
from engine.server import timing
from engine.server.tls import server_context
from engine.server.warmpath import warm_request_path


class HttpConnection:
    __slots__ = ("writer", "busy", "client", "fresh")
    # The binary protocol's "some bytes of a request read" (the drain waits for
    # it); HTTP closes between requests by `Connection: close` instead.
    mid_request = False

    def __init__(self, writer, client, fresh: bool):
        self.writer = writer
        self.busy = 0
        self.client = client
        self.fresh = fresh          # accepted after the drain began

    def say_goodbye(self) -> None:
        """HTTP says it on each response (`Connection: close`), not out of band."""

    def close_idle(self) -> None:
        if not self.busy:
            self.writer.close()


class Server:
    def __init__(self, config: EngineConfig, *, config_path: str | None = None, root: str | None = None,
                 logger: JsonLogger | None = None):
        self.config_path = config_path
        self.root = root
        self._log_note = None
        if logger is None:
            log_file, self._log_note = open_log_dir(config.log_dir)
            logger = JsonLogger(config.log_level, file=log_file)
        self.logger = logger
        self.state = ServerState(config, self.logger)
        self.state.registry.warm = warm_request_path
        self.app = KServeApp(self.state)
        self.connections: set = set()
        self.listeners: list[tuple[asyncio.AbstractServer, typing.Callable]] = []   # (server, protocol factory)
        self._tls_args: dict = {}
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self._changed = asyncio.Event()     # a request finished or a connection went away
        self._reloading: asyncio.Task | None = None
        self._reload_again = False
        self.exit_code = 0
        self.grpc: GrpcFrontend | None = None
        self._grpc_stopped: asyncio.Task | None = None

    # ---- lifecycle --------------------------------------------------------
    async def serve(self) -> int:
        await self.startup()
        if self.should_exit.is_set():
            return self.exit_code
        await self.main_loop()
        await self.shutdown()
        return self.exit_code

    async def startup(self) -> None:
        cfg = self.state.config
        tls = server_context(cfg.tls)  # before the models load: a bad certificate fails at once
        self._install_signals()
        asyncio.get_running_loop().set_exception_handler(self._loop_error)
        if cfg.threads:
            try:
                set_kernel_threads(cfg.threads)
            except Exception as exc:  # noqa: BLE001 - the runtime may size its own pool
                self.logger.warning("threads_not_set", error=str(exc))
        errors = await self.state.registry.apply(cfg, cfg.limits.drain_timeout_s)
        if errors:
            for name, err in errors.items():
                self.logger.error("model_load_failed", model=name, error=err)
            self.exit_code = 1
            self.should_exit.set()
            await self.state.registry.close_all()
            raise ServeError("; ".join(f"model {n!r}: {e}" for n, e in errors.items()))
        for name, detail in self.state.registry.capped_warm_ups().items():
            self.logger.warning("warm_plans_capped", model=name, detail=detail)
        limits = cfg.limits
        # A TLS handshake is held to the header timeout too: a slowloris may stall it instead.
        tls_args = {"ssl": tls, "ssl_handshake_timeout": limits.header_timeout_s} if tls else {}
        self._tls_args = tls_args
        loop = asyncio.get_running_loop()
        try:
            # gRPC first: a client that saw HTTP readiness finds the gRPC port open too.
            if cfg.grpc_port is not None:
                await self._start_grpc(cfg)
            for key, port, factory in (("http_port", cfg.http_port, self._http_protocol),
                                       ("binary_port", cfg.binary_port, lambda: BinaryConnection(self))):
                if port is not None:
                    listener = await _listen(key, cfg.listen, port, loop.create_server(
                        factory, cfg.listen, port, reuse_address=True, backlog=1024, **tls_args))
                    self.listeners.append((listener, factory))
        except ListenError:
            for listener, _ in self.listeners:
                listener.close()
            if self.grpc is not None:
                await self.grpc.stop(0)
            await self.state.registry.close_all()
            raise
        log_file = self.logger.file.path if self.logger.file else None
        self.logger.info("started", pid=os.getpid(), listen=cfg.listen, http_port=cfg.http_port, tls=tls is not None,
                         mutual_tls=bool(cfg.tls.client_ca_file),
                         binary_port=cfg.binary_port, grpc_port=cfg.grpc_port, models=[m.name for m in cfg.models],
                         loop=type(asyncio.get_running_loop()).__module__, log_file=log_file,
                         **({"log_file_skipped": self._log_note} if self._log_note else {}))

    async def _start_grpc(self, cfg: EngineConfig) -> None:
        self.grpc = GrpcFrontend(self)
        try:
            await self.grpc.start(cfg.listen, cfg.grpc_port, cfg.tls if cfg.tls.enabled else None)
        except RuntimeError:  # grpc says only "Failed to bind": the kernel is asked why, for the same line as HTTP's
            self.grpc = None
            raise _bind_error("grpc_port", cfg.listen, cfg.grpc_port) from None

    async def main_loop(self) -> None:
        await self.should_exit.wait()

    async def shutdown(self) -> None:
        st = self.state
        limits = st.config.limits
        st.draining = True
        t0 = time.monotonic()
        self.logger.info("draining", in_flight=st.in_flight, queued=sum(st.queue_depth().values()),
                         connections=len(self.connections), delay_s=limits.drain_delay_s)
        for conn in list(self.connections):
            conn.say_goodbye()
        if limits.drain_delay_s:
            await asyncio.sleep(limits.drain_delay_s)  # a configured wait for load balancers, not a poll
        handover = self._stop_accepting()
        if self.grpc is not None:
            # Refuses new RPCs now; those in flight are in st.in_flight, which the waits below cover.
            self._grpc_stopped = asyncio.get_running_loop().create_task(self.grpc.stop(limits.drain_timeout_s))
        if handover:
            await asyncio.gather(*handover, return_exceptions=True)  # handshakes are bounded by header_timeout_s
            await asyncio.sleep(0)  # their connection tasks, scheduled in connection_made, register themselves
        for conn in list(self.connections):
            if not conn.fresh:
                conn.close_idle()
        t1 = time.monotonic()
        end = t1 + limits.drain_timeout_s
        fresh_end = t1 + min(limits.header_timeout_s, limits.drain_timeout_s)
        await self._wait_until(lambda: not st.in_flight and not any(c.mid_request for c in self.connections) and (
            time.monotonic() >= fresh_end or not any(c.fresh for c in self.connections)), end, fresh_end)
        drained = await st.registry.drain_all(max(0.0, end - time.monotonic()))
        await self._wait_until(lambda: not st.in_flight, end)
        for conn in list(self.connections):
            conn.close_idle()
        if self._grpc_stopped is not None:
            await self._grpc_stopped  # in-flight RPCs are done (or the drain timed out): returns at once
        await st.registry.close_all()
        st.shm.close()
        st.codec_pool.shutdown(wait=False, cancel_futures=True)
        self.logger.info("stopped", drained=drained and not st.in_flight, unanswered=st.in_flight,
                         accepted_at_close=len(handover),
                         drain_s=round(time.monotonic() - t0, 3))
        if st.in_flight:
            self.exit_code = 1
        self.logger.close()

    def _stop_accepting(self) -> list[asyncio.Task]:
        """Close the listeners without resetting the connections the kernel
        has completed but the loop not yet accepted (closing a listening
        socket resets its backlog, and their clients may have sent a request
        already): a duplicate of each listening socket outlives the listener,
        its backlog is accepted and served like any connection made during the
        drain, and only then is it closed. The tasks that set them up."""
        loop = asyncio.get_running_loop()
        handover = []
        for listener, factory in self.listeners:
            dups = [socket.socket(fileno=os.dup(s.fileno())) for s in listener.sockets]
            listener.close()
            for sock in dups:
                sock.setblocking(False)
                while True:
                    try:
                        conn, _ = sock.accept()
                    except OSError:  # EAGAIN: the backlog is empty (or the socket failed: nothing to save)
                        break
                    handover.append(loop.create_task(loop.connect_accepted_socket(factory, conn, **self._tls_args)))
                sock.close()
        return handover

    def _http_protocol(self) -> asyncio.StreamReaderProtocol:
        reader = asyncio.StreamReader(limit=self.state.config.limits.max_header_bytes)
        return asyncio.StreamReaderProtocol(reader, self._http_connection)

    async def _wait_until(self, done, end: float, *wake_at: float) -> None:
        """Until done() or the monotonic time `end`; done() is re-checked each
        time a request finishes or a connection goes, and at each `wake_at`."""
        while not done() and not self.force_exit:
            now = time.monotonic()
            if now >= end:
                return
            timeout = min([end] + [w for w in wake_at if w > now]) - now
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

    def _loop_error(self, loop, context: dict) -> None:
        """asyncio's and uvloop's own errors (a failed accept() when out of
        file descriptors, a callback that raised) as JSON log lines."""
        exc = context.get("exception")
        self.logger.error("event_loop_error", error=context.get("message", ""),
                          exception=f"{type(exc).__name__}: {exc}" if exc else None)

    def connection_idle(self) -> None:
        self._changed.set()

    # ---- signals ----------------------------------------------------------
    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        # Python ignores SIGPIPE at start-up; said again here because the
        # table above promises it whoever embeds the server.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._handle_exit, sig)
        loop.add_signal_handler(signal.SIGHUP, self._handle_reload)
        loop.add_signal_handler(signal.SIGUSR2, self._handle_reopen)

    def _handle_exit(self, sig) -> None:
        if self.should_exit.is_set():
            self.force_exit = True
            self.logger.warning("forced_exit", signal=signal.Signals(sig).name, unanswered=self.state.in_flight)
            os._exit(1)
        self.logger.info("shutdown_requested", signal=signal.Signals(sig).name)
        self.should_exit.set()

    def _handle_reopen(self) -> None:
        self.logger.reopen()
        self.logger.info("log_reopened", signal="SIGUSR2",
                         log_file=self.logger.file.path if self.logger.file else None)

    def _handle_reload(self) -> None:
        if self.config_path is None:
            self.logger.warning("reload_ignored", reason="server was not started from a config file")
            return
        if self._reloading and not self._reloading.done():
            self._reload_again = True  # one more pass after the current one, to see the latest files
            return
        self._reloading = asyncio.get_running_loop().create_task(self._reload())

    async def _reload(self) -> None:
        self.logger.reopen()
        while True:
            self._reload_again = False
            await reload_config(self.state, self.config_path, self.root)
            if not self._reload_again:
                return

    # ---- HTTP -------------------------------------------------------------
    async def _http_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        client = f"{peer[0]}:{peer[1]}"
        st = self.state
        refused = st.connection_caps.admit(peer[0], st.config.limits)
        if refused is not None:
            writer.write(render_response(503, error_response(503, f"too many connections: {refused}").body,
                                         headers=[("Retry-After", "1")], keep_alive=False))
            writer.close()
            return
        set_nodelay(writer.get_extra_info("socket"))
        # high water 0: drain() returns once the response is in the kernel, so
        # the write timeout covers every byte, not only what exceeds 64 KiB.
        writer.transport.set_write_buffer_limits(high=0)
        conn = HttpConnection(writer, client, fresh=self.state.draining)
        self.connections.add(conn)
        try:
            while True:
                try:
                    req = await read_request(reader, writer, st.config.limits, client, self)
                except ClientGone:
                    return
                except ServeError as exc:  # malformed or over a limit: answered, then closed
                    st.metrics.protocol_errors["http"] += 1
                    st.logger.warning("http_error", client=client, status=exc.status, error=exc.message)
                    if await self._send(writer, render_response(exc.status,
                                                                error_response(exc.status, exc.message).body,
                                                                keep_alive=False, headers=exc.headers), client):
                        await _linger(reader, writer)
                    return
                conn.busy += 1
                st.in_flight += 1
                try:
                    keep_alive = await self._answer(req, writer) and not st.draining
                finally:
                    self.release(req)
                    conn.busy -= 1
                    st.in_flight -= 1
                    self.connection_idle()
                if not keep_alive:
                    if req.refusal is not None and req.length and not writer.transport.is_closing():
                        await _linger(reader, writer)  # the unread body must not turn the close into a reset
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self.connections.discard(conn)
            st.connection_caps.release(peer[0])
            self.connection_idle()
            writer.close()

    def admit(self, req) -> None:
        """Token and buffer budget from the head alone, before a byte of the
        body is read or `100 Continue` invites it."""
        st = self.state
        if not self.app.is_open(req.path):
            try:
                req.extra["principal"] = st.authenticate(req.header("authorization"), req.client.rsplit(":", 1)[0])
            except ServeError as exc:
                req.refusal = error_response(exc.status, exc.message, exc.headers)
                return
        if req.length:
            if not st.buffered.reserve(req.length, st.config.limits):
                req.refusal = error_response(
                    503, f"server busy: {st.buffered.used} bytes of request bodies buffered, a {req.length}-byte "
                         f"body would exceed limits.max_buffered_bytes ({st.config.limits.max_buffered_bytes})",
                    [("Retry-After", "1")])
                return
            req.reserved = req.length

    def release(self, req) -> None:
        self.state.buffered.release(req.reserved)
        req.reserved = 0

    async def _send(self, writer, data: bytes, client: str) -> bool:
        """Write and wait until the kernel took it; a client that reads
        nothing for limits.write_timeout_s is cut off (False)."""
        try:
            writer.write(data)
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.state.config.limits.write_timeout_s):
                    await writer.drain()
            return True
        except TimeoutError:
            self.state.logger.warning("write_timeout", client=client, unsent=writer.transport.get_write_buffer_size(),
                                      timeout_s=self.state.config.limits.write_timeout_s)
            writer.transport.abort()
            return False
        except ConnectionError:
            return False

    async def _answer(self, req, writer) -> bool:
        st = self.state
        trace_id, span_id, parent = trace_context(req.header("traceparent"))
        log: dict = {"t_first": req.first_at, "t_read": req.read_at}
        if req.refusal is not None:
            resp = req.refusal
        else:
            try:
                resp = await self.app.handle(req, log)
            except Exception as exc:  # noqa: BLE001 - no input may crash the server
                st.logger.error("handler_crashed", error=f"{type(exc).__name__}: {exc}", path=req.path)
                resp = error_response(500, f"internal error: {type(exc).__name__}")
        if st.draining:
            req.keep_alive = False  # decided when the response is written: the drain may have begun meanwhile
        resp.headers.append(("traceparent", f"00-{trace_id}-{span_id}-01"))
        if resp.status == 200 and (server_timing := timing.server_timing(log)):
            resp.headers.append(("Server-Timing", server_timing))
        body = b"" if req.method == "HEAD" else resp.body
        data = render_response(resp.status, body, content_type=resp.content_type, headers=resp.headers,
                               keep_alive=req.keep_alive, http_minor=req.http_minor)
        if not await self._send(writer, data, req.client):
            req.keep_alive = False
        log["t_written"] = written = timing.clock()
        elapsed = written - req.first_at
        model = st.model_label(log["model"]) if "model" in log else ""
        protocol = "http" if req.path.endswith("/infer") else "http-meta"
        if protocol == "http" or resp.status >= 400:
            st.metrics.count_request(model if protocol == "http" else "", protocol, resp.status, elapsed)
            spans = timing.phases(log) if resp.status == 200 and model else None
            if spans is not None:
                st.metrics.observe_phases(model, protocol, spans)
            st.logger.info("request", trace_id=trace_id, span_id=span_id, parent_id=parent, client=req.client,
                           method=req.method, path=req.path, model=model or None, batch=log.get("batch"),
                           batch_size=log.get("batch_size"), instance=log.get("instance"),
                           priority=log.get("priority"), status=resp.status, **timing.log_fields(spans),
                           latency_us=int(elapsed * 1e6))
        return req.keep_alive


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float = 1.0,
                  max_bytes: int = 1 << 20) -> None:
    """Half-close and discard what the client still sends (bounded), so the
    error response is not destroyed by a reset caused by unread input."""
    try:
        if writer.can_write_eof():
            writer.write_eof()
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while max_bytes > 0:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.0, end - loop.time()))
            if not chunk:
                return
            max_bytes -= len(chunk)
    except (TimeoutError, ConnectionError, asyncio.LimitOverrunError):
        return


class ListenError(ServeError):
    """A configured address cannot be listened on (most often: another process has the port).
    Its own class for its exit status, and because start-up closes the listeners it opened."""

    exit_code = 98  # EADDRINUSE's errno: distinct from 1 (config/model errors) for supervisors and scripts


async def _listen(key: str, host: str, port: int, bind):
    try:
        return await bind
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"cannot listen on {host}:{port}: address already in use",
                              hint=f"is another engine running? set engine.{key}") from None
        # asyncio wraps the errno in a long sentence; the errno's own text is the one line we want.
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise ListenError(f"cannot listen on {host}:{port}: {reason}",
                          hint=f"check engine.listen and engine.{key}") from None


def _bind_error(key: str, host: str, port: int) -> ListenError:
    """The ListenError _listen gives, for a listener (grpc's) that reports no errno: a plain bind tells it."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return ListenError(f"cannot listen on {host}:{port}: address already in use",
                               hint=f"is another engine running? set engine.{key}")
        return ListenError(f"cannot listen on {host}:{port}: {os.strerror(exc.errno).lower() if exc.errno else exc}",
                           hint=f"check engine.listen and engine.{key}")
    return ListenError(f"cannot listen on {host}:{port}: grpc could not bind it", hint=f"check engine.{key}")


def run_server(config: EngineConfig, *, config_path: str | None = None, root: str | None = None) -> int:
    """Run until SIGTERM; the process exit code. Uses uvloop when installed."""
    server = Server(config, config_path=config_path, root=root)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    if uvloop is not None:
        return uvloop.run(server.serve())
    return asyncio.run(server.serve())
