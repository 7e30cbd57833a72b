"""Graph passes: small functions Graph -> Graph, run in DEFAULT_PASSES order.

Each pass rewrites only what it can prove equivalent; the list of passes
actually applied (changed something) is reported by the converter.
"""

from __future__ import annotations

from typing import Callable

from engine.ir import Graph
from engine.passes.cleanup import eliminate_dead_nodes
from engine.passes.folding import fold_batchnorm, fold_constants
from engine.passes.fusion import (fuse_bias_activation, fuse_conv_residual, fuse_gelu, fuse_layernorm,
                                  fuse_matmul_scale, fuse_silu)
from engine.passes.fuse_attention import fuse_attention
from engine.passes.fuse_dw_pw import fuse_depthwise_pointwise
from engine.passes.fuse_recurrent import fuse_recurrent_input
from engine.passes.fuse_rmsnorm import fuse_rmsnorm
from engine.passes.gemm_conv import gemm_as_pointwise_conv
from engine.passes.layout import to_kernel_layout
from engine.passes.precision import mark_bf16, mark_bf16_activations
from engine.passes.prepack import prepack_weights
from engine.passes.qdq_fuse import qdq_fuse

DEFAULT_PASSES: tuple[Callable[[Graph], Graph], ...] = (
    # First: fold_constants would turn the int8 weights' DequantizeLinear into float32.
    qdq_fuse, fold_constants, eliminate_dead_nodes, fold_batchnorm, fuse_layernorm, fuse_rmsnorm, fuse_matmul_scale,
    # After fuse_matmul_scale (the 1/sqrt(d) is then the GEMM's alpha), before
    # fuse_bias_activation (which would take a constant mask for a bias).
    fuse_attention, fuse_silu, fuse_bias_activation, fuse_gelu, fuse_recurrent_input,
    to_kernel_layout, gemm_as_pointwise_conv, fuse_conv_residual, prepack_weights, fuse_depthwise_pointwise,
    eliminate_dead_nodes,
)


PRECISIONS = ("fp32", "bf16")  # what a converted model computes in (engine.models[].precision)


def passes_for(precision: str = "fp32") -> tuple[Callable[[Graph], Graph], ...]:
    """DEFAULT_PASSES, with mark_bf16 after the fusions for bf16 (before
    gemm_as_pointwise_conv, which leaves a marked Gemm a Gemm: the bf16 GEMM)
    and mark_bf16_activations last (when every reader of a tensor is known)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return DEFAULT_PASSES
    i = DEFAULT_PASSES.index(to_kernel_layout)
    return DEFAULT_PASSES[:i] + (mark_bf16,) + DEFAULT_PASSES[i:] + (mark_bf16_activations,)


def run_passes(graph: Graph, passes=DEFAULT_PASSES) -> tuple[Graph, list[str]]:
    applied = []
    for p in passes:
        before = (len(graph.nodes), sum(len(n.attrs) for n in graph.nodes), len(graph.initializers))
        graph = p(graph)
        after = (len(graph.nodes), sum(len(n.attrs) for n in graph.nodes), len(graph.initializers))
        if before != after and p.__name__ not in applied:
            applied.append(p.__name__)
    return graph, applied
