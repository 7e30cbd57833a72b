"""Each model's precision and the low-precision kernel path it runs, as
/health and /v2/models/<m>/config report them: the zoo MLP converted in fp32
and in bf16, and digits converted with precision auto (int8 on a VNNI/AMX
level), served side by side by one server."""

from __future__ import annotations

import json

from engine.convert import BF16_LEVELS, INT8_LEVELS, PrecisionOptions, convert_file
from engine.kernels.gemm_lowp import paths
from engine.kernels.levels import level
from engine.session import InferenceSession


def test_health_and_config_show_precision_and_kernel_path(serve_factory, zoo_mlp, zoo, tmp_path):
    bf16, auto = tmp_path / "mlp_bf16.aie", tmp_path / "digits_auto.aie"
    convert_file(zoo_mlp.path.with_suffix(".onnx"), bf16, precision=PrecisionOptions("bf16"))
    digits = zoo("digits")
    chosen = convert_file(digits, auto, precision=PrecisionOptions(
        "auto", sample=digits.with_name("digits.sample.npy"))).precision
    assert chosen == ("int8" if level() in INT8_LEVELS else "bf16" if level() in BF16_LEVELS else "fp32")
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
