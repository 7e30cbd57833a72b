"""A bf16 model's FusedAttention (ATTENTION_BF16: Q Kt and P V on the bf16
GEMM, scale/mask/softmax in fp32) at every level against float64.

Bound, first order, per output row i (aie_gemm_lowp.h: rounding an input to
bf16 costs 2^-9 relative, K products are summed in fp32):
    scores:  |dS_il| <= alpha * (2^-8 + (dk + 2) 2^-24) * (|q| |kt|)_il  =: E_il
    softmax: |dP_il| <= P_il * 2 * max_l E_il
    P V:     |dY_ij| <= sum_l (|dP_il| + P_il (2^-8 + (L + 2) 2^-24)) |v_lj|
             = (2 max_l E_il + 2^-8 + (L + 2) 2^-24) * (P |V|)_ij
asserted with a factor 1.25 for the second-order terms and the fp32
softmax's own rounding."""

from __future__ import annotations

import numpy as np
import pytest

from engine import aie_format, kernels
from engine.kernels.abi import Op
from engine.onnx_import import import_file
from engine.passes import passes_for, run_passes
from engine.session import InferenceSession
from tests.runtime.test_fusion_attention import DK, L, M, _feeds, _model


def _reference(feeds: dict, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    q, kt, v = (feeds[n].astype(np.float64) for n in ("q", "kt", "v"))
    s = alpha * q @ kt + (feeds["mask"].astype(np.float64) if "mask" in feeds else 0.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    e = alpha * (2.0**-8 + (DK + 2) * 2.0**-24) * (np.abs(q) @ np.abs(kt))
    bound = (2 * e.max(-1, keepdims=True) + 2.0**-8 + (L + 2) * 2.0**-24) * (p @ np.abs(v))
    return p @ v, 1.25 * bound


def _convert(tmp, **variant):
    src = _model(tmp / "m.onnx", **variant)
    graph, _ = run_passes(import_file(src), passes_for("bf16"))
    fused = [n for n in graph.nodes if n.op == "FusedAttention"]
    assert len(fused) == 1 and fused[0].attrs.get("_precision") == "bf16", [n.op for n in graph.nodes]
    aie_format.write(tmp / "m.aie", graph)
    return tmp / "m.aie", float(fused[0].attrs.get("alpha", 1.0)), _feeds(src, 2)


def _check(path, alpha, feeds, level):
    want, bound = _reference(feeds, alpha)
    outs = []
    with kernels.use_level(level):
        for threads in (1, 2):
            sess = InferenceSession(path, threads=threads)
            outs.append(sess.run(None, feeds)[0])
            assert Op.ATTENTION_BF16 in set(sess.plans()[0].steps[:, 0]), "the fused bf16 step ran"
            assert "attention_bf16" in sess.kernel_paths, sess.kernel_paths
    assert np.array_equal(outs[0], outs[1]), "the result does not depend on the thread count"
    ratio = np.abs(outs[0].astype(np.float64) - want) / (bound + 1e-30)
    assert ratio.max() <= 1.0, f"{level}: {ratio.max():.3g} of the bf16 attention bound"


@pytest.fixture(scope="module")
def bf16_attention(tmp_path_factory):
    return _convert(tmp_path_factory.mktemp("attn_bf16"))


@pytest.mark.parametrize("level", kernels.available_levels())
def test_bf16_attention_within_the_bound_at_every_level(bf16_attention, level):
    _check(*bf16_attention, level)


@pytest.mark.parametrize("variant", [dict(mask_shape=None), dict(mask_shape=("batch", 1, 1, L)),
                                     dict(mask_shape=("batch", 1, M, 1))],  # the last: a mask strided along L
                         ids=["no-mask", "row-mask", "column-mask"])
def test_bf16_attention_masks(tmp_path, variant):
    _check(*_convert(tmp_path, **variant), kernels.best_level())
