"""bf16 conversion end to end (engine.convert, `ai-engine convert
--precision`): zoo models in bf16 against their fp32 conversion, the
accuracy contract refusing what exceeds a limit (nothing written), and a
bf16 .aie packed on this host's level running on AVX2 through the portable
path.

Whole-model bound: each bf16 GEMM input is rounded to 8 significant bits
(2^-9 relative, kernels/include/aie_gemm_lowp.h); over the zoo models'
layers that stays below engine.convert.AUTO_MAX_REL_ERR (3e-2, max |bf16 -
fp32| / max |fp32| per output) with a cosine of at least 0.999 per sample."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine import InferenceSession
from engine.convert import AUTO_MAX_REL_ERR, PrecisionOptions, convert_file
from engine.deploy.convert_models import convert_spec_models
from engine.errors import ConversionError
from engine.kernels import level_unsupported

REPO = Path(__file__).resolve().parents[2]
COSINE_MIN = 0.999


def _cli(*args, isa: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("AIE_ISA", None)
    if isa:
        env["AIE_ISA"] = isa
    return subprocess.run([sys.executable, "-m", "engine.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_digits_keeps_its_heldout_accuracy_within_half_a_point(zoo, tmp_path):
    from models import digits

    src = zoo("digits")
    summary = convert_file(src, tmp_path / "digits.aie",
                           precision=PrecisionOptions("bf16", sample=src.with_name("digits.sample.npy")))
    assert summary.precision == "bf16" and summary.accuracy.top1_agreement == 1.0
    x, y = digits.heldout_set()
    fp32 = InferenceSession(src, threads=1).run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    bf16 = InferenceSession(tmp_path / "digits.aie", threads=1).run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    acc32, acc16 = float((fp32 == y).mean()), float((bf16 == y).mean())
    print(f"\ndigits held-out accuracy: fp32 {acc32:.4f}, bf16 {acc16:.4f} ({len(y)} samples)")
    assert acc16 >= acc32 - 0.005, (acc32, acc16)


@pytest.mark.parametrize("name, feeds", [
    ("bert_mini", lambda rng: {"input_ids": rng.integers(0, 100, (2, 8)).astype(np.int64),
                               "attention_mask": np.ones((2, 8), np.int64)}),
    ("resnet18", lambda rng: {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}),
])
def test_zoo_model_in_bf16_within_the_bound(zoo, tmp_path, name, feeds):
    src = zoo(name)
    sample = tmp_path / "sample.npz"
    np.savez(sample, **feeds(np.random.default_rng(5)))
    bf16 = convert_file(src, tmp_path / "bf16.aie", precision=PrecisionOptions("bf16", sample=sample))
    acc = bf16.accuracy
    print(f"\n{name} bf16: " + "; ".join(line.strip() for line in acc.lines()[1:]))
    assert bf16.precision == "bf16" and acc.samples == len(next(iter(feeds(np.random.default_rng(5)).values())))
    assert acc.max_rel_err <= AUTO_MAX_REL_ERR and acc.cosine >= COSINE_MIN


def test_a_limit_exceeded_refuses_with_the_numbers_and_writes_nothing(zoo, tmp_path):
    src = zoo("digits")
    dst = tmp_path / "out.aie"
    proc = _cli("convert", src, "-o", dst, "--precision", "bf16", "--sample", src.with_name("digits.sample.npy"),
                "--max-rel-err", "1e-9", "-q")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "bf16 model refused, nothing written: max rel error" in line and "> limit 1.000e-09" in line
    assert "measured on 10 samples" in line
    assert not dst.exists() and list(tmp_path.iterdir()) == []


def test_a_spec_asking_bf16_with_a_tight_limit_fails_conversion(zoo, tmp_path):
    src = zoo("digits")
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"engine": {"models": [
        {"name": "digits", "source": str(src), "sample": str(src.with_name("digits.sample.npy")),
         "precision": "bf16", "min_top1_agreement": 1.0, "max_rel_err": 1e-9}]}}))
    with pytest.raises(ConversionError, match=r"max rel error .* > limit 1\.000e-09 \(measured on 10 samples"):
        convert_spec_models([REPO / "sysconfig" / "spec.yaml", site], tmp_path / "out")
    assert not list((tmp_path / "out").glob("*"))


def test_auto_under_avx2_picks_fp32_and_a_bf16_file_runs_there(zoo, tmp_path):
    if level_unsupported("avx2"):
        pytest.skip(f"avx2 unavailable on this host: {level_unsupported('avx2')}")
    src = zoo("digits")
    proc = _cli("convert", src, "-o", tmp_path / "auto.aie", "--precision", "auto",
                "--sample", src.with_name("digits.sample.npy"), isa="avx2")
    assert proc.returncode == 0, proc.stderr
    assert "precision:      fp32" in proc.stdout and "auto: bf16 skipped: level avx2 has no bf16 hardware" in proc.stdout
    assert "auto: int8 skipped: level avx2 has no int8 dot-product hardware" in proc.stdout
    # Packed on this host's level (AMX here), run with AIE_ISA=avx2: the portable path, the same answers.
    bf16 = tmp_path / "bf16.aie"
    convert_file(src, bf16, precision=PrecisionOptions("bf16"))
    x = np.load(src.with_name("digits.sample.npy"))
    np.save(tmp_path / "x.npy", x)
    here = InferenceSession(bf16, threads=1).run(None, {"image": x})[0]
    script = ("import sys, numpy as np; from engine import InferenceSession; s = InferenceSession(sys.argv[1], "
              "threads=1); np.save(sys.argv[3], s.run(None, {'image': np.load(sys.argv[2])})[0]); "
              "print(s.precision, s.kernel_paths['gemm_bf16'])")
    env = {**os.environ, "AIE_ISA": "avx2"}
    proc = subprocess.run([sys.executable, "-c", script, bf16, tmp_path / "x.npy", tmp_path / "y.npy"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["bf16", "portable_bf16_32x32"]
    there = np.load(tmp_path / "y.npy")
    # The same bf16-rounded products; only the fp32 summation order differs between paths.
    np.testing.assert_allclose(there, here, rtol=0, atol=1e-4 * float(np.abs(here).max()))
    assert (there.argmax(1) == here.argmax(1)).all()


def test_a_model_without_weights_to_round_stays_fp32(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "softmax.onnx")
    summary = convert_file(tmp_path / "softmax.onnx", tmp_path / "softmax.aie", precision=PrecisionOptions("bf16"))
    assert summary.precision == "fp32" and summary.accuracy is None
    assert any("no node can compute in bf16" in n for n in summary.notes)
    assert InferenceSession(tmp_path / "softmax.aie").precision == "fp32"


def test_random_inputs_take_the_given_shapes_and_say_so(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(2).standard_normal((8, 6)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", 6])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "mm.onnx")
    summary = convert_file(tmp_path / "mm.onnx", tmp_path / "mm.aie",
                           precision=PrecisionOptions("bf16", shapes={"x": [3, 5, 8]}))
    assert summary.precision == "bf16" and summary.accuracy.samples == 4 * 3  # 4 seeded batches of 3
    assert any(n.startswith("no samples: compared on 4 seeded random inputs at x [3, 5, 8]") for n in summary.notes)
    with pytest.raises(ConversionError, match=r"shapes name inputs \['z'\], the model's inputs are \['x'\]"):
        convert_file(tmp_path / "mm.onnx", tmp_path / "bad.aie", precision=PrecisionOptions("bf16", shapes={"z": [1]}))
    assert not (tmp_path / "bad.aie").exists()
