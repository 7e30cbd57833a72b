"""The conventional stack the serving benchmark compares against: onnxruntime
behind Starlette on uvicorn, speaking the same KServe v2 infer route (JSON and
the binary tensor extension) so one load generator drives both.

    AIE_PEER_MODELS=mlp=/path/mlp.onnx,resnet18=/path/r.onnx \\
        uvicorn ort_peer:app --workers N --port P
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

_opts = ort.SessionOptions()
_opts.intra_op_num_threads = 1   # one worker per core, one thread per worker
_opts.inter_op_num_threads = 1
SESSIONS = {}
for item in filter(None, os.environ.get("AIE_PEER_MODELS", "").split(",")):
    name, path = item.split("=", 1)
    SESSIONS[name] = ort.InferenceSession(path, _opts, providers=["CPUExecutionProvider"])


async def infer(request: Request):
    name = request.path_params["name"]
    sess = SESSIONS.get(name)
    if sess is None:
        return JSONResponse({"error": f"unknown model {name}"}, 404)
    body = await request.body()
    hlen = request.headers.get("inference-header-content-length")
    split = int(hlen) if hlen else len(body)
    doc = json.loads(body[:split])
    feeds, offset = {}, split
    for item in doc["inputs"]:
        size = (item.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            feeds[item["name"]] = np.frombuffer(body, np.float32, size // 4, offset).reshape(item["shape"])
            offset += size
        else:
            feeds[item["name"]] = np.asarray(item["data"], np.float32).reshape(item["shape"])
    outs = sess.run(None, feeds)
    binary = bool((doc.get("parameters") or {}).get("binary_data_output"))
    tensors, chunks = [], []
    for meta, arr in zip(sess.get_outputs(), outs):
        entry = {"name": meta.name, "datatype": "FP32", "shape": list(arr.shape)}
        if binary:
            raw = arr.astype(np.float32).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = arr.ravel().tolist()
        tensors.append(entry)
    head = json.dumps({"model_name": name, "outputs": tensors}).encode()
    if not chunks:
        return Response(head, media_type="application/json")
    return Response(head + b"".join(chunks), media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(head))})


app = Starlette(routes=[Route("/v2/models/{name}/infer", infer, methods=["POST"])])
