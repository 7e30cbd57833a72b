"""engine.kernels: a thin numpy layer over the C kernels, for tests and benchmarks.

Every function validates dtype, contiguity and shapes and raises ValueError
with a clear message instead of crashing; the GIL is released while a kernel
runs (ctypes does that for every foreign call).
"""

from __future__ import annotations

from engine.kernels._lib import library_path
from engine.kernels.conv import *  # noqa: F401,F403  conv2d, conv_transpose2d, pooling
from engine.kernels.eltwise import *  # noqa: F401,F403
from engine.kernels.gemm import PackedB, get_threads, matmul, matmul_packed, pack_b, set_threads  # noqa: F401
from engine.kernels.gemm_lowp import matmul_bf16, matmul_u8s8, pack_b_bf16, pack_b_s8  # noqa: F401
from engine.kernels.layout import *  # noqa: F401,F403
from engine.kernels.levels import (ISAS, LEVELS, available_isas, available_levels, best_isa,  # noqa: F401
                                   best_level, isa, level, level_unsupported, set_isa, set_level, use_isa,
                                   use_level)
from engine.kernels.norm import *  # noqa: F401,F403
from engine.kernels.reduce import *  # noqa: F401,F403

__all__ = ["isa", "best_isa", "available_isas", "set_isa", "use_isa", "level", "best_level", "available_levels",
           "level_unsupported", "set_level", "use_level", "library_path"]
