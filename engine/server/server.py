"""The server process: startup(), main_loop(), shutdown(), as uvicorn's.

Signals (installed on the event loop; the README's "Signals" section says the same):

  | signal          | effect                                                          | log event          |
  |-----------------|-----------------------------------------------------------------|--------------------|
  | SIGTERM, SIGINT | graceful shutdown: stop accepting, answer queued and in-flight  | shutdown_requested |
  |                 | requests (bounded by limits.drain_timeout_s), exit 0 (1 when    |                    |
  |                 | some went unanswered)                                           |                    |
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

Shutdown order: readiness goes to 503 and listeners close -> new requests on
open connections get 503 + Connection: close -> wait for queues to drain and
for every accepted request to be answered -> close connections -> release
models and their inference threads.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time

from engine.errors import EngineError
from engine.server.binary import BinaryConnection
from engine.server.config import EngineConfig
from engine.server.http import ClientGone, HttpError, read_request, render_response, set_nodelay
from engine.server.kserve import KServeApp, error_response, trace_context
from engine.server.logs import JsonLogger, open_log_dir
from engine.server.reload import reload_config
from engine.server.state import ServerState


class HttpConnection:
    __slots__ = ("writer", "busy", "client")

    def __init__(self, writer, client):
        self.writer = writer
        self.busy = 0
        self.client = client

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
        self.app = KServeApp(self.state)
        self.connections: set = set()
        self.listeners: list[asyncio.AbstractServer] = []
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self._idle = asyncio.Event()
        self._reloading: asyncio.Task | None = None
        self._reload_again = False
        self.exit_code = 0

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
        self._install_signals()
        if cfg.threads:
            try:
                from engine.kernels._lib import lib

                lib().aie_threads_set(cfg.threads)
            except Exception as exc:  # noqa: BLE001 - the runtime may size its own pool
                self.logger.warning("threads_not_set", error=str(exc))
        errors = await self.state.registry.apply(cfg, cfg.limits.drain_timeout_s)
        if errors:
            for name, err in errors.items():
                self.logger.error("model_load_failed", model=name, error=err)
            self.exit_code = 1
            self.should_exit.set()
            await self.state.registry.close_all()
            raise StartupError("; ".join(f"model {n!r}: {e}" for n, e in errors.items()))
        limits = cfg.limits
        loop = asyncio.get_running_loop()
        try:
            self.listeners.append(await _listen("http_port", cfg.listen, cfg.http_port, asyncio.start_server(
                self._http_connection, cfg.listen, cfg.http_port, limit=limits.max_header_bytes,
                reuse_address=True, backlog=1024)))
            if cfg.binary_port is not None:
                self.listeners.append(await _listen("binary_port", cfg.listen, cfg.binary_port, loop.create_server(
                    lambda: BinaryConnection(self), cfg.listen, cfg.binary_port, reuse_address=True, backlog=1024)))
        except ListenError:
            for listener in self.listeners:
                listener.close()
            await self.state.registry.close_all()
            raise
        log_file = self.logger.file.path if self.logger.file else None
        self.logger.info("started", pid=os.getpid(), listen=cfg.listen, http_port=cfg.http_port,
                         binary_port=cfg.binary_port, models=[m.name for m in cfg.models],
                         loop=type(asyncio.get_running_loop()).__module__, log_file=log_file,
                         **({"log_file_skipped": self._log_note} if self._log_note else {}))

    async def main_loop(self) -> None:
        await self.should_exit.wait()

    async def shutdown(self) -> None:
        st = self.state
        st.draining = True
        t0 = time.monotonic()
        self.logger.info("draining", in_flight=st.in_flight, queued=sum(st.queue_depth().values()))
        for listener in self.listeners:
            listener.close()
        timeout = st.config.limits.drain_timeout_s
        drained = await st.registry.drain_all(timeout)
        # Every accepted request answered (its response written), within what is left of the budget.
        remaining = max(0.0, timeout - (time.monotonic() - t0))
        while st.in_flight and remaining > 0 and not self.force_exit:
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), remaining)
            except TimeoutError:
                break
            remaining = max(0.0, timeout - (time.monotonic() - t0))
        for conn in list(self.connections):
            conn.close_idle()
        await st.registry.close_all()
        st.codec_pool.shutdown(wait=False, cancel_futures=True)
        self.logger.info("stopped", drained=drained and not st.in_flight, unanswered=st.in_flight,
                         drain_s=round(time.monotonic() - t0, 3))
        if st.in_flight:
            self.exit_code = 1
        self.logger.close()

    def connection_idle(self) -> None:
        if self.state.in_flight == 0:
            self._idle.set()

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
        set_nodelay(writer.get_extra_info("socket"))
        conn = HttpConnection(writer, client)
        self.connections.add(conn)
        st = self.state
        try:
            while True:
                try:
                    req = await read_request(reader, writer, st.config.limits, client)
                except ClientGone:
                    return
                except HttpError as exc:
                    st.metrics.protocol_errors["http"] += 1
                    st.logger.warning("http_error", client=client, status=exc.status, error=exc.message)
                    writer.write(render_response(exc.status, error_response(exc.status, exc.message).body,
                                                 keep_alive=False, headers=exc.headers))
                    await writer.drain()
                    await _linger(reader, writer)
                    return
                conn.busy += 1
                st.in_flight += 1
                try:
                    keep_alive = await self._answer(req, writer) and not st.draining
                finally:
                    conn.busy -= 1
                    st.in_flight -= 1
                    self.connection_idle()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self.connections.discard(conn)
            writer.close()

    async def _answer(self, req, writer) -> bool:
        st = self.state
        t0 = time.monotonic()
        trace_id, span_id, parent = trace_context(req.header("traceparent"))
        log: dict = {}
        if st.draining:
            resp = error_response(503, "server is shutting down", [("Retry-After", "1")])
            req.keep_alive = False
        else:
            try:
                resp = await self.app.handle(req, log)
            except Exception as exc:  # noqa: BLE001 - no input may crash the server
                st.logger.error("handler_crashed", error=f"{type(exc).__name__}: {exc}", path=req.path)
                resp = error_response(500, f"internal error: {type(exc).__name__}")
        resp.headers.append(("traceparent", f"00-{trace_id}-{span_id}-01"))
        body = b"" if req.method == "HEAD" else resp.body
        data = render_response(resp.status, body, content_type=resp.content_type, headers=resp.headers,
                               keep_alive=req.keep_alive)
        try:
            writer.write(data)
            await writer.drain()
        except ConnectionError:
            req.keep_alive = False
        elapsed = time.monotonic() - t0
        model = log.get("model", "")
        protocol = "http" if req.path.endswith("/infer") else "http-meta"
        if protocol == "http" or resp.status >= 400:
            st.metrics.count_request(model if protocol == "http" else "", protocol, resp.status, elapsed)
        if protocol == "http" or resp.status >= 400:
            st.logger.info("request", trace_id=trace_id, span_id=span_id, parent_id=parent, client=req.client,
                           method=req.method, path=req.path, model=model or None, batch=log.get("batch"),
                           batch_size=log.get("batch_size"), instance=log.get("instance"),
                           priority=log.get("priority"),
                           queue_us=log.get("queue_us"), compute_us=log.get("compute_us"), status=resp.status,
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


class StartupError(EngineError):
    """A model listed in the config could not be loaded at start-up."""


class ListenError(EngineError):
    """A configured address cannot be listened on (most often: another process has the port)."""

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
