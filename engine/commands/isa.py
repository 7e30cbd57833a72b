"""`ai-engine isa`: which kernel path this host runs, and which it could."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON")


def run(args: argparse.Namespace) -> int:
    from engine import kernels
    from engine.kernels.gemm_lowp import paths

    selected, best = kernels.isa(), kernels.best_isa()
    # The vector ISA of the fp32 kernels, then the level (with the dot-product
    # and matrix extensions) and the kernels the bf16/int8 GEMMs run on it.
    info = {"selected": selected, "best": best, "level": kernels.level(), "best_level": kernels.best_level(),
            "amx": kernels.level_unsupported("amx") or "available", "gemm_bf16": paths()["bf16"],
            "gemm_int8": paths()["int8"], "library": str(kernels.library_path())}
    if args.json:
        print(json.dumps(info))
    else:
        print("\n".join(f"{key}: {value}" for key, value in info.items()))
    return 0
