"""Whole-model latency with every group-1 Conv in bf16 (CONV_BF16), against
the same model in fp32 and OpenVINO in its default precision (bf16 on AMX).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_bf16_convs.py
        [--models resnet18,mobilenetv2] [--threads 2] [--runs 20] [--blocks 3] [--pause 1.0] [--profile]

A stopgap until bench_models.py has a precision option (the precision pass
is another change): the model is converted with the Convs marked the way the
model test does it (tests/models/test_bf16_conv.py). Runners are timed as
bench_models.py times them (blocks in rotation, pauses between, best block's
median). --profile prints the bf16 model's slowest steps (engine.plan_run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    from benchmarks.bench_models import blocks, max_rel_err, ov_runner
    from engine.kernels.conv_lowp import conv_bf16_path
    from engine.session import InferenceSession
    from models import zoo
    from tests.models.test_bf16_conv import convert_bf16

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mobilenetv2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench_bf16_convs."))
    print(f"bf16 conv path: {conv_bf16_path()}, {args.threads} threads, batch 1")
    print("| model | ai-engine fp32 ms | ai-engine bf16 convs ms | OpenVINO default ms | bf16/fp32 | bf16/OpenVINO "
          "| max rel err bf16 | max rel err OpenVINO |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        src = zoo.ensure(name, REPO / "build" / "models")
        feeds = zoo.random_inputs(name, seed=1)
        convert_bf16(src, tmp / f"{name}.aie")
        fp32 = InferenceSession(src, threads=args.threads)
        bf16 = InferenceSession(tmp / f"{name}.aie", threads=args.threads)
        ov, _ = ov_runner(src, args.threads, feeds, fp32=False)
        ref = fp32.run(None, feeds)[0]
        err_bf16 = max_rel_err(bf16.run(None, feeds)[0], ref)
        err_ov = max_rel_err(ov(feeds)[0], ref)
        t = blocks({"fp32": lambda: fp32.run(None, feeds), "bf16": lambda: bf16.run(None, feeds),
                    "ov": lambda: ov(feeds)}, args.runs, args.blocks, args.pause)
        f, b, o = t["fp32"][0], t["bf16"][0], t["ov"][0]
        print(f"| {name} | {f:.2f} | {b:.2f} | {o:.2f} | {b / f:.2f} | {b / o:.2f} | {err_bf16:.1e} | {err_ov:.1e} |",
              flush=True)
        if args.profile:
            from benchmarks.profile_model import step_label

            rows = bf16.profile(feeds)
            total = sum(r["ns"] for r in rows)
            for r in sorted(rows, key=lambda r: -r["ns"])[:12]:
                print(f"    {r['ns'] / 1e6:7.3f} ms  {100 * r['ns'] / total:4.1f}%  {step_label(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
