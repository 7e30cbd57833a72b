"""The five latency phases of one inference request, defined once here for
every protocol (HTTP JSON, HTTP binary-tensor bodies, the binary protocol,
gRPC: there grpc's core reads, parses, serialises and writes messages out of
Python's sight, so first = read = the handler's start and written = encoded).

Seven instants, all read from one clock (time.monotonic, the scheduler's
clock, so the scheduler's own stamps need no conversion):

  first     the first byte of the request (HTTP request head, binary frame
            header) is read by the server. A request already buffered behind
            another on a keep-alive or pipelined connection: when the server
            starts reading it.
  read      the body (binary: the whole frame) is fully read.
  admitted  the decoded, validated request enters the model's scheduler
            (InferenceRequest.arrival).
  started   its batch starts (the scheduler picked it; joining inputs follows).
  done      the batch's results are back on the event loop (join, run and
            split included).
  encoded   the answer's bytes are built (HTTP: the body, before the head).
  written   the answer is written: HTTP, every byte taken by the kernel
            (the writer is drained); binary, the frame handed to the
            transport (kernel or, under backpressure, its bounded buffer
            limits.max_unsent_bytes).

  phase         from      to        what it holds
  network       first     read      the rest of the head, admission (token, buffer budget), the body's arrival
  decode        read      admitted  routing, JSON / binary tensors -> numpy, validation
  queue         admitted  started   waiting for the batch window, a free instance, higher priorities
  compute       started   done      the batch's run as the server sees it (a batched request: its batch's)
  encode_write  done      written   waking the handler, numpy -> bytes, writing

The phases are contiguous, so they add up to `written - first` (the
server-side end-to-end latency, `latency_us` in the log) exactly. Not
counted anywhere: connecting (TCP/TLS handshakes, the kernel's accept
queue), the time the first byte waits in the socket before the loop reads
it, the network after the last byte is written, and the client's own work.
A client therefore measures at least the sum.

`Server-Timing` cannot hold encode_write (the header is part of what is
written): it carries `encode` (done -> encoded) instead; the log line and
the metrics carry encode_write.
"""

from __future__ import annotations

import time

clock = time.monotonic   # engine.server.scheduler.clock: one clock for every stamp

PHASES = ("network", "decode", "queue", "compute", "encode_write")


def _spans(t: dict, end: str) -> tuple[float, float, float, float, float] | None:
    """The five spans between the stamps in `t` (the request's log/info dict:
    t_first, t_read, t_admitted, t_started, t_done and `end`), or None when
    the request did not reach all of them (refused, failed, expired). Spelt
    out, not looped: it runs once per request."""
    try:
        first, read, admitted, started = t["t_first"], t["t_read"], t["t_admitted"], t["t_started"]
        done, last = t["t_done"], t[end]
    except KeyError:
        return None
    return read - first, admitted - read, started - admitted, done - started, last - done


def phases(t: dict) -> tuple[float, float, float, float, float] | None:
    """The five phases in seconds, the last one ending when the answer is written."""
    return _spans(t, "t_written")


_NO_PHASES = dict.fromkeys(("network_us", "decode_us", "queue_us", "compute_us", "encode_write_us"))


def log_fields(spans: tuple[float, ...] | None) -> dict:
    """The phases as the request log's *_us fields (None when absent)."""
    if spans is None:
        return _NO_PHASES
    network, decode, queue, compute, encode_write = spans
    return {"network_us": int(network * 1e6), "decode_us": int(decode * 1e6), "queue_us": int(queue * 1e6),
            "compute_us": int(compute * 1e6), "encode_write_us": int(encode_write * 1e6)}


def server_timing(t: dict) -> str | None:
    """The Server-Timing header value (W3C: durations in ms): network,
    decode, queue, compute and encode (done -> encoded; the write is not over
    when the header is built). None when the request did not run."""
    spans = _spans(t, "t_encoded")
    if spans is None:
        return None
    network, decode, queue, compute, encode = spans
    return (f"network;dur={network * 1e3:.3f}, decode;dur={decode * 1e3:.3f}, queue;dur={queue * 1e3:.3f}, "
            f"compute;dur={compute * 1e3:.3f}, encode;dur={encode * 1e3:.3f}")
