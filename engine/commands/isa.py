"""`ai-engine isa`: which kernel path this host runs, and which it could."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON")


def run(args: argparse.Namespace) -> int:
    from engine import kernels

    selected, best = kernels.isa(), kernels.best_isa()
    if args.json:
        import json

        print(json.dumps({"selected": selected, "best": best, "library": str(kernels.library_path())}))
    else:
        print(f"selected: {selected}\nbest:     {best}\nlibrary:  {kernels.library_path()}")
    return 0
