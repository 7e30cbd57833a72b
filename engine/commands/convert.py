"""`ai-engine convert in.onnx -o out.aie`: convert and print the summary,
including the planned memory provisioning uses to size hugepages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="ONNX model (.onnx)")
    parser.add_argument("-o", "--output", type=Path, help="output .aie file (default: source with .aie suffix)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the planned memory in bytes")


def run(args: argparse.Namespace) -> int:
    from engine.convert import convert_file

    dst = args.output or args.source.with_suffix(".aie")
    progress = None if args.quiet else (lambda msg: print(f"  {msg}", file=sys.stderr))
    summary = convert_file(args.source, dst, progress=progress)
    if args.quiet:
        print(summary.planned_memory)
    else:
        print("\n".join(summary.lines()))
    return 0
