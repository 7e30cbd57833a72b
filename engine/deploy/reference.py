"""Each model's smoke test: an input and the output the engine computed for
it right after conversion (the reference a deployed host must reproduce).

The input is engine.models[].sample when given (digits names its held-out
images, one per digit, with labels beside them, so a deployment can print a
meaningful prediction); else the converter's seeded random inputs
(engine.convert.representative_inputs) at the model's declared shapes, with
engine.models[].shapes filling in symbolic dimensions. A
symbolic dimension with neither is an error that says which key to add.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.deploy import DeployError
from engine.errors import EngineError

# A host runs the same kernels on possibly another ISA path (AVX-512 vs AVX2
# vs scalar): sums reassociate, so compare with a float32-sized tolerance.
RTOL, ATOL = 1e-4, 1e-5
SEED = 20240607
_DTYPES = {"tensor(float)": ("FP32", np.float32), "tensor(int64)": ("INT64", np.int64),
           "tensor(int32)": ("INT32", np.int32)}


def _labels(sample: Path) -> list | None:
    """Labels of a sample's rows from <stem>.json beside it ({"labels": [...]}),
    so a deploy can print a meaningful prediction (digits writes one)."""
    meta = sample.with_suffix(".json")
    try:
        return json.loads(meta.read_text()).get("labels") if meta.is_file() else None
    except (OSError, ValueError, AttributeError):
        raise DeployError("unreadable labels file (expected JSON with a labels list)", where=str(meta)) from None


def _load_sample(name: str, sample: Path, inputs: list) -> dict[str, np.ndarray]:
    """engine.models[].sample: a .npy for a one-input model, or a .npz with one
    array per input name."""
    where = f"engine.models[{name}].sample: {sample}"
    try:
        loaded = np.load(sample, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DeployError(f"cannot read the sample: {exc}", where=where,
                          hint="a .npy (one-input model) or a .npz with one array per input") from None
    names = [arg.name for arg in inputs]
    if isinstance(loaded, np.ndarray):
        if len(names) != 1:
            raise DeployError(f"a .npy holds one array, the model has {len(names)} inputs ({', '.join(names)})",
                              where=where, hint="use a .npz with one array per input name")
        return {names[0]: loaded}
    with loaded:
        feeds = {k: loaded[k] for k in loaded.files}
    if sorted(feeds) != sorted(names):
        raise DeployError(f"the .npz holds arrays {sorted(feeds)}, the model's inputs are {sorted(names)}",
                          where=where, hint="one array per input, named like the input")
    return feeds


def _input_shapes(name: str, inputs: list, shapes: dict | None) -> dict[str, list[int]]:
    """Concrete shapes for the smoke input: the model's own when every dim is
    fixed, else engine.models[].shapes; a symbolic dim without either is an
    error that says what to add (guessing 1 hides models that need more)."""
    shapes = shapes or {}
    unknown = sorted(set(shapes) - {arg.name for arg in inputs})
    if unknown:
        raise DeployError(f"model {name!r} has no input {unknown[0]!r} (its inputs: "
                          f"{', '.join(arg.name for arg in inputs)})", where=f"engine.models[{name}].shapes")
    out = {}
    for arg in inputs:
        dims = list(arg.shape)
        given = shapes.get(arg.name)
        if given is None:
            if all(isinstance(d, int) and d > 0 for d in dims):
                out[arg.name] = dims
                continue
            raise DeployError(f"model {name!r}: input {arg.name!r} has symbolic dims {_dims(dims)}; the smoke input "
                              f"needs concrete ones", where=f"engine.models[{name}]",
                              hint=f"add shapes: {{{arg.name}: [...]}} (a list of ints) or sample: <file.npy|.npz>")
        fixed_ok = len(given) == len(dims) and all(not (isinstance(d, int) and d > 0) or d == g
                                                   for d, g in zip(dims, given))
        if not fixed_ok:
            raise DeployError(f"shape {given} does not fit input {arg.name!r} with dims {_dims(dims)}",
                              where=f"engine.models[{name}].shapes")
        out[arg.name] = list(given)
    return out


def _dims(dims: list) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else (str(d) if d else "?") for d in dims) + "]"


def _sample_inputs(name: str, session, sample: Path | None, shapes: dict | None) -> tuple[dict[str, np.ndarray], dict]:
    inputs = session.get_inputs()
    if sample is not None:
        return _load_sample(name, sample, inputs), {"labels": _labels(sample)}
    concrete = _input_shapes(name, inputs, shapes)
    for arg in inputs:
        if arg.type not in _DTYPES:
            raise DeployError(f"no smoke input for input {arg.name!r} of type {arg.type}", where=f"model {name!r}",
                              hint=f"supported: {', '.join(_DTYPES)}; or give engine.models[{name}].sample")
    # the converter's seeded inputs (what it executed the model on), at the smoke shapes
    from engine.convert import representative_inputs  # lazily: see write_reference

    feeds, _ = representative_inputs(session.graph, concrete, seed=SEED)
    return feeds, {}


def _datatype(array: np.ndarray) -> str:
    for datatype, dtype in _DTYPES.values():
        if array.dtype == dtype:
            return datatype
    raise DeployError(f"no KServe datatype for {array.dtype}")


def _tensor(name: str, array: np.ndarray) -> dict:
    return {"name": name, "shape": list(array.shape), "datatype": _datatype(array), "data": array.ravel().tolist()}


def write_reference(name: str, aie_path: Path, onnx_path: Path, out: Path, *, sample: Path | None = None,
                    shapes: dict | None = None) -> dict:
    """Run the converted model once on the smoke input (engine.models[].sample,
    else seeded random inputs at the model's or engine.models[].shapes' shapes)
    and write out/<name>.smoke.json."""
    # Imported here: describe_sample is used by every deploy command, the
    # runtime (onnx, the planner) only when a reference is written.
    from engine.session import InferenceSession

    session = InferenceSession(str(aie_path), threads=1)
    feeds, extra = _sample_inputs(name, session, sample, shapes)
    names = [o.name for o in session.get_outputs()]
    try:
        outputs = session.run(None, feeds)
    except EngineError as exc:
        raise DeployError(f"model {name!r} rejects its smoke input: {exc}", where=f"engine.models[{name}]",
                          hint="check its sample or shapes") from None
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
