"""digits: the default model of the embedded spec, a real (small) classifier.

At generation time it renders a synthetic digits data set (models.digits_data),
trains an MLP 784-128-10 with Adam in plain numpy (seeded, single-threaded
BLAS where threadpoolctl is available, a few seconds on one core) and exports
  input  "image"          float32 [N, 1, 28, 28], pixels in [0, 1], white on black
  output "probabilities"  float32 [N, 10] (Softmax)
It also writes digits.sample.npy (one held-out image per digit) and
digits.sample.json (their labels, the expected top-1 and its probability, the
held-out accuracy) so a deployment can show one meaningful prediction.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import onnx

from models import digits_data
from models.graph_builder import FLOAT, GraphBuilder

TRAIN_SEED, HELDOUT_SEED, INIT_SEED = 7001, 7002, 7003
N_TRAIN, N_HELDOUT = 12000, 2000
HIDDEN, EPOCHS, BATCH, LR = 128, 12, 100, 2e-3


@dataclass
class Trained:
    model: onnx.ModelProto
    heldout_accuracy: float
    sample_images: np.ndarray      # [10, 1, 28, 28] float32, one per digit
    sample_labels: list[int]
    sample_top1: list[int]
    sample_probability: list[float]


def _single_thread_blas():
    """Pin BLAS to one thread: the brief is 'seconds on one core', and a fixed
    thread count keeps the float summation order, hence the weights, reproducible."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # test-only dependency; without it BLAS uses its own default
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x @ params["w1"].T + params["b1"], 0.0)
    logits = h @ params["w2"].T + params["b2"]
    return h, logits


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _train(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(INIT_SEED)
    d = x.shape[1]
    params = {
        "w1": (rng.standard_normal((HIDDEN, d)) * math.sqrt(2.0 / d)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((10, HIDDEN)) * math.sqrt(1.0 / HIDDEN)).astype(np.float32),
        "b2": np.zeros(10, np.float32),
    }
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, step = 0.9, 0.999, 0
    onehot = np.eye(10, dtype=np.float32)[y]
    for epoch in range(EPOCHS):
        lr = LR * 0.5 * (1 + math.cos(math.pi * epoch / EPOCHS))  # cosine decay
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            xb = x[idx]
            h, logits = _forward(params, xb)
            dlogits = (_softmax(logits) - onehot[idx]) / len(idx)   # cross-entropy gradient
            dh = (dlogits @ params["w2"]) * (h > 0)
            grads = {"w2": dlogits.T @ h, "b2": dlogits.sum(0), "w1": dh.T @ xb, "b1": dh.sum(0)}
            step += 1
            for k, g in grads.items():
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v[k] = beta2 * v[k] + (1 - beta2) * g * g
                mhat = m[k] / (1 - beta1 ** step)
                vhat = v[k] / (1 - beta2 ** step)
                params[k] = (params[k] - lr * mhat / (np.sqrt(vhat) + 1e-8)).astype(np.float32)
    return params


def _export(params: dict[str, np.ndarray], accuracy: float) -> onnx.ModelProto:
    g = GraphBuilder("digits", seed=0)
    x = g.input("image", FLOAT, ["N", 1, digits_data.SIDE, digits_data.SIDE])
    x = g.op("Flatten", [x], axis=1)
    x = g.op("Relu", [g.op("Gemm", [x, g.const(params["w1"], "fc1_w"), g.const(params["b1"], "fc1_b")],
                           transB=1)])
    logits = g.op("Gemm", [x, g.const(params["w2"], "fc2_w"), g.const(params["b2"], "fc2_b")], transB=1)
    g.op("Softmax", [logits], axis=1, outputs=["probabilities"])
    g.output("probabilities", FLOAT, ["N", 10])
    return g.model(f"Digit classifier (MLP 784-{HIDDEN}-10) trained on synthetic renderings of a "
                   f"5x7 font; held-out accuracy {accuracy:.4f} on {N_HELDOUT} samples. "
                   "Input: 28x28 pixels in [0, 1], white on black.")


def train_and_export() -> Trained:
    x_train, y_train = digits_data.render(N_TRAIN, TRAIN_SEED)
    x_held, y_held = digits_data.render(N_HELDOUT, HELDOUT_SEED)
    with _single_thread_blas():
        params = _train(x_train.reshape(N_TRAIN, -1), y_train)
        _, logits = _forward(params, x_held.reshape(N_HELDOUT, -1))
    probs = _softmax(logits.astype(np.float64))
    accuracy = float((probs.argmax(1) == y_held).mean())

    picks = [int(np.flatnonzero(y_held == digit)[0]) for digit in range(10)]
    return Trained(
        model=_export(params, accuracy),
        heldout_accuracy=accuracy,
        sample_images=np.ascontiguousarray(x_held[picks]),
        sample_labels=[int(y_held[i]) for i in picks],
        sample_top1=[int(probs[i].argmax()) for i in picks],
        sample_probability=[round(float(probs[i].max()), 6) for i in picks],
    )


def heldout_set() -> tuple[np.ndarray, np.ndarray]:
    """The held-out images and labels the reported accuracy was measured on."""
    return digits_data.render(N_HELDOUT, HELDOUT_SEED)
