"""The one operator registry: op type -> {since_version: lowering rule}.

A node resolves to the rule with the highest version <= the model's opset
(as onnx.reference does). Every family module contributes RULES (the table)
and ATTRS (attributes its rules understand); anything else — an unknown op,
an opset older than every rule, an unknown attribute — is an
UnsupportedOperatorError naming the op, the node, the opset and the list of
supported ops.
"""

from __future__ import annotations

from typing import Callable

from engine.errors import UnsupportedOperatorError
from engine.ops import (attention, bitwise, control, cumulative, data, dynamic, einsum, elementwise, fused_attention,
                        fused_norm, linear, loops, losses, lp_pool, masking, nn, normalization, qlinear, qoperator,
                        quantize, recurrent, recurrent_unrolled, reduce, sampling, scatter, scatter_composed, sorting,
                        spectral)

_FAMILIES = (data, elementwise, linear, nn, reduce, control, recurrent, masking, normalization, losses, attention,
             bitwise, cumulative, scatter, sorting, recurrent_unrolled, einsum, lp_pool, sampling,
             spectral, quantize, scatter_composed, loops, fused_norm, fused_attention, qlinear, qoperator, dynamic)

REGISTRY: dict[str, dict[int, Callable]] = {}
KNOWN_ATTRS: dict[str, set[str]] = {}
for _family in _FAMILIES:
    for _op, _versions in _family.RULES.items():
        REGISTRY.setdefault(_op, {}).update(_versions)
    for _op, _attrs in _family.ATTRS.items():
        KNOWN_ATTRS.setdefault(_op, set()).update(_attrs)


def supported_ops() -> list[str]:
    return sorted(REGISTRY)


def op_where(node, opset: int) -> str:
    """`node 'n', opset 17` (plus the domain when not the default ONNX one)."""
    domain = f"domain {node.domain}, " if node.domain not in ("", "ai.onnx") else ""
    return f"node {node.name!r}, {domain}opset {opset}"


def resolve(node, opset: int) -> Callable:
    # The error names the operator, its domain and opset and the node, and
    # nothing else: a list of every supported op buried what was wrong.
    versions = REGISTRY.get(node.op)
    if versions is None:
        raise UnsupportedOperatorError(f"operator {node.op} ({op_where(node, opset)}) is not supported")
    usable = [v for v in versions if v <= opset]
    if not usable:
        raise UnsupportedOperatorError(
            f"operator {node.op} ({op_where(node, opset)}) has no rule for this opset (rules from {min(versions)})")
    # _nhwc (engine.passes.to_kernel_layout) marks a node whose tensors are
    # NHWC; layout-agnostic rules ignore it, layout-aware ones read it. Same
    # for _precision (engine.passes.precision): a rule without a bf16 kernel
    # computes in fp32, which is within any bf16 bound.
    unknown = sorted(set(node.attrs) - KNOWN_ATTRS.get(node.op, set()) - {"_nhwc", "_precision"})
    if unknown:
        raise UnsupportedOperatorError(
            f"operator {node.op} ({op_where(node, opset)}): unsupported attribute(s) {', '.join(unknown)}")
    return versions[max(usable)]
