"""bert_mini: a BERT-mini-style encoder (4 layers, d=256, 4 heads, FFN 1024).

Inputs: input_ids int64 [N, S] (vocabulary 8192, not BERT's 30522: the
embedding table's size changes nothing about the compute and keeps the file
at ~21 MB), attention_mask int64 [N, S] (1 = attend, 0 = padding); S is
symbolic, 128 in tests, at most 512 (the position table). No token-type
embedding. Outputs: last_hidden_state [N, S, 256] and pooler_output [N, 256]
(tanh of a dense layer on the first token).

Written the way exporters write it, so the converter's passes have real work:
position ids from Shape -> Gather -> Range, the mask via Cast -> Unsqueeze ->
Expand -> Where, Erf-based GELU, and the normalisation as the fused
LayerNormalization op (embeddings, layers 0 and 2) or as the decomposed
ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div chain (layers 1 and 3).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from models.graph_builder import BOOL, FLOAT, INT64, GraphBuilder

VOCAB, MAX_POS, D, HEADS, FFN, LAYERS = 8192, 512, 256, 4, 1024, 4
EPS = 1e-12  # BERT's LayerNorm epsilon


def _dense(g: GraphBuilder, x: str, fin: int, fout: int) -> str:
    w = g.normal((fin, fout), 1 / math.sqrt(fin), "dense_w")
    return g.op("Add", [g.op("MatMul", [x, w]), g.normal((fout,), 0.02, "dense_b")])


def _norm_params(g: GraphBuilder) -> tuple[str, str]:
    return g.normal((D,), 0.1, "ln_gamma", mean=1.0), g.normal((D,), 0.02, "ln_beta")


def _layer_norm(g: GraphBuilder, x: str) -> str:
    gamma, beta = _norm_params(g)
    return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=EPS)


def _layer_norm_decomposed(g: GraphBuilder, x: str) -> str:
    gamma, beta = _norm_params(g)
    mean = g.op("ReduceMean", [x], axes=[-1], keepdims=1)
    centred = g.op("Sub", [x, mean])
    var = g.op("ReduceMean", [g.op("Pow", [centred, g.const(2.0, "two")])], axes=[-1], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [var, g.const(EPS, "eps")])])
    return g.op("Add", [g.op("Mul", [g.op("Div", [centred, std]), gamma]), beta])


def _gelu_erf(g: GraphBuilder, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt 2)), as torch.onnx exports nn.GELU()."""
    erf = g.op("Erf", [g.op("Div", [x, g.const(math.sqrt(2.0), "sqrt2")])])
    return g.op("Mul", [g.op("Mul", [x, g.const(0.5, "half")]), g.op("Add", [erf, g.const(1.0, "one")])])


def _attention(g: GraphBuilder, h: str, mask_bias: str) -> str:
    head_dim = D // HEADS
    split_heads = g.const([0, 0, HEADS, head_dim], "heads_shape", np.int64)  # 0 = copy N and S
    q = g.op("Transpose", [g.op("Reshape", [_dense(g, h, D, D), split_heads])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [_dense(g, h, D, D), split_heads])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [_dense(g, h, D, D), split_heads])], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(math.sqrt(head_dim), "sqrt_dk")])
    probs = g.op("Softmax", [g.op("Add", [scores, mask_bias])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const([0, 0, D], "merge_shape", np.int64)])
    return _dense(g, ctx, D, D)


def bert_mini() -> onnx.ModelProto:
    g = GraphBuilder("bert_mini", seed=105)
    ids = g.input("input_ids", INT64, ["N", "S"])
    mask = g.input("attention_mask", INT64, ["N", "S"])

    shape = g.op("Shape", [ids])
    seq = g.op("Gather", [shape, g.const(1, "idx1", np.int64)], axis=0)            # scalar S
    seq_1d = g.op("Gather", [shape, g.const([1], "idx1v", np.int64)], axis=0)      # [S]
    batch_1d = g.op("Gather", [shape, g.const([0], "idx0v", np.int64)], axis=0)    # [N]
    positions = g.op("Range", [g.const(0, "zero_i", np.int64), seq, g.const(1, "one_i", np.int64)])
    words = g.op("Gather", [g.normal((VOCAB, D), 0.02, "word_emb"), ids], axis=0)
    pos = g.op("Gather", [g.normal((MAX_POS, D), 0.02, "pos_emb"), positions], axis=0)
    h = _layer_norm(g, g.op("Add", [words, pos]))

    # Additive mask [N, 1, S, S]: 0 where attended, -10000 at padding (BERT's value).
    keep = g.op("Unsqueeze", [g.op("Cast", [mask], to=BOOL), g.const([1, 2], "axes12", np.int64)])
    full = g.op("Concat", [batch_1d, g.const([1], "one_v", np.int64), seq_1d, seq_1d], axis=0)
    keep = g.op("Expand", [keep, full])
    mask_bias = g.op("Where", [keep, g.const(0.0, "zero_f"), g.const(-10000.0, "neg_big")])

    for layer in range(LAYERS):
        norm = _layer_norm if layer % 2 == 0 else _layer_norm_decomposed
        h = norm(g, g.op("Add", [h, _attention(g, h, mask_bias)]))
        ffn = _dense(g, _gelu_erf(g, _dense(g, h, D, FFN)), FFN, D)
        h = norm(g, g.op("Add", [h, ffn]))

    g.op("Identity", [h], outputs=["last_hidden_state"])
    first = g.op("Gather", [h, g.const(0, "idx0", np.int64)], axis=1)
    g.op("Tanh", [_dense(g, first, D, D)], outputs=["pooler_output"])
    g.output("last_hidden_state", FLOAT, ["N", "S", D])
    g.output("pooler_output", FLOAT, ["N", D])
    return g.model("BERT-mini-style encoder: 4 layers, d=256, 4 heads, vocab 8192, random weights.")
