"""Each model's precision and the low-precision kernel path it runs, as
/health and /v2/models/<m>/config report them: the zoo MLP converted in fp32
and in bf16, and digits converted with precision auto (whichever of its candidates
timed fastest), served side by side by one server."""

from __future__ import annotations

import json

from engine.convert import BF16_LEVELS, INT8_LEVELS, PrecisionOptions, auto_decide, convert_file
from engine.kernels.gemm_lowp import paths
from engine.kernels.levels import level
from engine.session import InferenceSession
from tests.quantize.test_auto_precision import _timings


def test_health_and_config_show_precision_and_kernel_path(serve_factory, zoo_mlp, zoo, tmp_path):
    bf16, auto = tmp_path / "mlp_bf16.aie", tmp_path / "digits_auto.aie"
    convert_file(zoo_mlp.path.with_suffix(".onnx"), bf16, precision=PrecisionOptions("bf16"))
    digits = zoo("digits")
    summary = convert_file(digits, auto, precision=PrecisionOptions(
        "auto", sample=digits.with_name("digits.sample.npy")))
    chosen = summary.precision
    if level() in INT8_LEVELS + BF16_LEVELS:
        assert chosen == auto_decide(_timings("\n".join(summary.notes)))[0], summary.notes
    else:
        assert chosen == "fp32", summary.notes
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}, {"name": "mlp_bf16", "path": str(bf16)},
                            {"name": "digits_auto", "path": str(auto)}])
    status, body, _ = server.get("/health")
    assert status == 200
    models = json.loads(body)["models"]
    assert (models["mlp"]["precision"], models["mlp"]["kernel_paths"]) == ("fp32", {})
    # The server selects the same level as this process (no AIE_ISA in either).
    assert (models["mlp_bf16"]["precision"], models["mlp_bf16"]["kernel_paths"]) == \
        ("bf16", {"gemm_bf16": paths()["bf16"]})
    assert (models["digits_auto"]["precision"], models["digits_auto"]["kernel_paths"]) == \
        (chosen, InferenceSession(auto, threads=1).kernel_paths)
    for name, precision in (("mlp", "fp32"), ("mlp_bf16", "bf16"), ("digits_auto", chosen)):
        status, body, _ = server.get(f"/v2/models/{name}/config")
        assert status == 200 and json.loads(body)["precision"] == precision
