"""The conventional gRPC stack bench_grpc.py compares against: onnxruntime
behind a plain grpcio server (a thread pool, one worker thread per core, one
onnxruntime thread each), speaking the KServe v2 ModelInfer with
raw_input_contents / raw_output_contents from the same generated stubs as
the engine (engine.server.grpc_gen).

    python benchmarks/grpc_ort_peer.py PORT WORKERS name=/path/model.onnx [...]
"""

from __future__ import annotations

import sys
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.server.grpc_stubs import load  # noqa: E402

pb2, pb2_grpc, _ = load()
_DTYPES = {"FP32": np.float32, "INT64": np.int64}


class Peer(pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, sessions: dict):
        self.sessions = sessions

    def ServerReady(self, request, context):  # noqa: N802 - the protocol's names
        return pb2.ServerReadyResponse(ready=True)

    def ModelInfer(self, request, context):  # noqa: N802
        sess = self.sessions.get(request.model_name)
        if sess is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.model_name}")
        feeds = {t.name: np.frombuffer(raw, _DTYPES[t.datatype]).reshape(list(t.shape))
                 for t, raw in zip(request.inputs, request.raw_input_contents)}
        outs = sess.run(None, feeds)
        resp = pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
        for meta, arr in zip(sess.get_outputs(), outs):
            resp.outputs.add(name=meta.name, datatype="FP32", shape=arr.shape)
            resp.raw_output_contents.append(np.ascontiguousarray(arr, np.float32).tobytes())
        return resp


def main(argv: list[str]) -> None:
    port, workers = int(argv[0]), int(argv[1])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1   # one worker thread per core, one compute thread per worker
    opts.inter_op_num_threads = 1
    sessions = {}
    for item in argv[2:]:
        name, path = item.split("=", 1)
        sessions[name] = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
    pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Peer(sessions), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main(sys.argv[1:])
