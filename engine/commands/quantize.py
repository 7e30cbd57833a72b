"""`ai-engine quantize model.onnx --calibration DIR_OR_FILE -o model.int8.onnx`:
static post-training quantisation to a standard QDQ ONNX model, with its
error against fp32 measured on the calibration samples and printed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="fp32 ONNX model (.onnx)")
    parser.add_argument("--calibration", required=True, type=Path, metavar="DIR_OR_FILE",
                        help="calibration samples: a .npy (one-input model), a .npz (one array per input), or a "
                             "directory of them; samples along the first axis, each file one batch")
    parser.add_argument("-o", "--output", type=Path,
                        help="output QDQ model (default: the source with .int8.onnx); written only if accepted")
    parser.add_argument("--method", choices=("minmax", "percentile"), default="minmax",
                        help="activation range: min/max seen (default) or the --percentile of the values seen")
    parser.add_argument("--percentile", type=float, default=99.999, help="for --method percentile (default 99.999)")
    parser.add_argument("--max-rel-err", type=float, metavar="E",
                        help="refuse (write nothing, exit 1) if max |int8 - fp32| / max |fp32| exceeds E")
    parser.add_argument("--min-top1-agreement", type=float, metavar="F",
                        help="refuse if the top-1 class agrees with fp32 on less than this fraction of samples")
    parser.add_argument("--threads", type=int, help="intra-op threads for the calibration runs (default: all CPUs)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from engine.quantize import QuantizeOptions, quantize_file

    dst = args.output or args.source.with_suffix(".int8.onnx")
    opts = QuantizeOptions(method=args.method, percentile=args.percentile, max_rel_err=args.max_rel_err,
                           min_top1_agreement=args.min_top1_agreement, threads=args.threads)
    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr))
    result = quantize_file(args.source, args.calibration, dst, opts, progress=progress)
    if args.json:
        print(json.dumps({"source": result.source, "destination": result.destination, "samples": result.samples,
                          "nodes": result.nodes, "accuracy": result.accuracy.as_json()}, indent=2))
    else:
        print("\n".join(result.lines()))
    return 0
