"""Each model's smoke test: an input and the output the engine computed for
it right after conversion (the reference a deployed host must reproduce).

digits uses its held-out sample images (one per digit, with labels, so a
deployment can print a meaningful prediction); other models get seeded
random inputs at their declared shapes (symbolic dimensions -> 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.deploy import DeployError

# A host runs the same kernels on possibly another ISA path (AVX-512 vs AVX2
# vs scalar): sums reassociate, so compare with a float32-sized tolerance.
RTOL, ATOL = 1e-4, 1e-5
SEED = 20240607
_DTYPES = {"tensor(float)": ("FP32", np.float32), "tensor(int64)": ("INT64", np.int64),
           "tensor(int32)": ("INT32", np.int32)}


def _sample_inputs(name: str, session, onnx_path: Path) -> tuple[dict[str, np.ndarray], dict]:
    sample = onnx_path.with_name(f"{name}.sample.npy")
    meta = onnx_path.with_name(f"{name}.sample.json")
    if sample.is_file() and meta.is_file():
        info = json.loads(meta.read_text())
        return {info["input"]: np.load(sample)}, {"labels": info.get("labels")}
    rng = np.random.default_rng(SEED)
    feeds = {}
    for arg in session.get_inputs():
        if arg.type not in _DTYPES:
            raise DeployError(f"no smoke input for input {arg.name!r} of type {arg.type}", where=str(onnx_path),
                              hint=f"supported: {', '.join(_DTYPES)}")
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        dtype = _DTYPES[arg.type][1]
        feeds[arg.name] = (rng.standard_normal(shape).astype(dtype) if dtype == np.float32
                           else rng.integers(0, 2, size=shape, dtype=dtype))
    return feeds, {}


def _datatype(array: np.ndarray) -> str:
    for datatype, dtype in _DTYPES.values():
        if array.dtype == dtype:
            return datatype
    raise DeployError(f"no KServe datatype for {array.dtype}")


def _tensor(name: str, array: np.ndarray) -> dict:
    return {"name": name, "shape": list(array.shape), "datatype": _datatype(array), "data": array.ravel().tolist()}


def write_reference(name: str, aie_path: Path, onnx_path: Path, out: Path) -> dict:
    """Run the converted model once and write out/<name>.smoke.json."""
    from engine.session import InferenceSession

    session = InferenceSession(str(aie_path), threads=1)
    feeds, extra = _sample_inputs(name, session, onnx_path)
    names = [o.name for o in session.get_outputs()]
    outputs = session.run(None, feeds)
    doc = {
        "_generated": f"by ai-engine deploy from {onnx_path.name} via {aie_path.name}; do not edit",
        "model": name,
        "rtol": RTOL, "atol": ATOL,
        "inputs": [_tensor(k, v) for k, v in feeds.items()],
        "outputs": [_tensor(k, np.asarray(v)) for k, v in zip(names, outputs)],
        **{k: v for k, v in extra.items() if v is not None},
    }
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
    tmp.replace(out)
    return doc


def describe_sample(reference: dict, outputs: dict | None = None) -> str:
    """One line a person understands: 'digit 7 -> predicted 7 (p=0.998)' for a
    classifier with labels, else the first output's shape."""
    outs = outputs or {o["name"]: o for o in reference["outputs"]}
    first = reference["outputs"][0]
    got = outs[first["name"]]
    labels = reference.get("labels")
    if labels and len(first["shape"]) == 2 and first["shape"][0] == len(labels):
        width = first["shape"][1]
        pick = min(7, len(labels) - 1)  # one sample is enough to show; 7 reads well
        row = got["data"][pick * width:(pick + 1) * width]
        best = max(range(width), key=row.__getitem__)
        return f"digit {labels[pick]} → predicted {best} (p={row[best]:.4f})"
    return f"{reference['model']}: output {first['name']} shape {got.get('shape')}"
