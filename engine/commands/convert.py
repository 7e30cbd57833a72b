"""`ai-engine convert in.onnx -o out.aie`: convert and print the summary,
including the planned memory provisioning uses to size hugepages.
--precision bf16/auto also prints the error against fp32 (engine.convert)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, help="ONNX model (.onnx)")
    parser.add_argument("-o", "--output", type=Path, help="output .aie file (default: source with .aie suffix)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the planned memory in bytes")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8", "auto"), default="fp32",
                        help="fp32 (default: exact, as always); bf16: matrix products with constant weights in "
                             "bf16 (weights stored in bf16, sums in fp32), measured against fp32 on the samples; "
                             "int8: quantised on the samples (per-channel int8 weights, uint8 activations, as "
                             "`ai-engine quantize`), run on the int8 kernels, measured against fp32; "
                             "auto: of int8 (this CPU has VNNI or AMX and --sample is given), bf16 (AMX or AVX-512 "
                             "BF16) and fp32, those within the limit (max rel err 3e-2 unless given) are timed and "
                             "the fastest taken (a more exact one within 10%% of it preferred); it prints the "
                             "timings and why each other one was passed over")
    parser.add_argument("--sample", type=Path, help="inputs to measure bf16/int8 against fp32 on (and int8's calibration): a .npy (one-input "
                                                    "model), a .npz (one array per input) or a directory of them; "
                                                    "default: seeded random inputs (and the summary says so)")
    parser.add_argument("--max-rel-err", type=float, metavar="X",
                        help="refuse bf16/int8 (nothing written; auto: pass it over) when max |bf16 - fp32| / "
                             "max |fp32| of an output exceeds X")
    parser.add_argument("--min-top1-agreement", type=float, metavar="F",
                        help="refuse bf16/int8 (auto: pass it over) when fewer than this fraction (0..1) of the "
                             "samples keep fp32's top-1 class")


def run(args: argparse.Namespace) -> int:
    from engine.convert import PrecisionOptions, convert_file

    dst = args.output or args.source.with_suffix(".aie")
    progress = None if args.quiet else (lambda msg: print(f"  {msg}", file=sys.stderr))
    opts = PrecisionOptions(args.precision, sample=args.sample, max_rel_err=args.max_rel_err,
                            min_top1_agreement=args.min_top1_agreement)
    summary = convert_file(args.source, dst, progress=progress, precision=opts)
    if args.quiet:
        print(summary.planned_memory)
    else:
        print("\n".join(summary.lines()))
    return 0
