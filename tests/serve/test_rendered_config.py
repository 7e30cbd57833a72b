"""The engine.yaml that provisioning renders (hostspec, from the default spec
plus an overlay) starts the server, as the systemd unit would run it, in a
local root: `ai-engine serve --config ROOT/etc/ai-engine/engine.yaml --root ROOT`."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
import yaml

from serve_support import _kernel_env, free_port, stop_process, wait_for


def ai_engine() -> list[str]:
    script = Path(sys.executable).with_name("ai-engine")  # the console script pip installed beside python
    return [str(script)] if script.exists() else [sys.executable, "-m", "engine.cli"]


def wait_ready(proc, url: str, log: Path, timeout: float = 30.0) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False
    wait_for(ready, f"the server to report ready (log: {log})", timeout)


def test_rendered_engine_yaml_starts_the_server(tmp_path, zoo_mlp):
    from hostspec.loader import DEFAULT_SPEC, load_spec
    from hostspec.render import render_tree, write_tree

    from engine.convert import convert_file

    http_port, binary_port = free_port(), free_port()
    onnx = zoo_mlp.path.with_suffix(".onnx")  # the zoo source the fixture converted
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"engine": {"http_port": http_port, "binary_port": binary_port,
                                                  "models": [{"name": "mlp", "source": str(onnx)}]}}))
    root = tmp_path / "root"
    write_tree(render_tree(load_spec([DEFAULT_SPEC, overlay])), root)
    config = root / "etc/ai-engine/engine.yaml"
    rendered = yaml.safe_load(config.read_text())
    model_path = rendered["models"][0]["path"]
    assert model_path == "/opt/ai-engine/current/models/mlp.aie" and rendered["models"][0]["instances"] == 0
    target = root / model_path.lstrip("/")
    target.parent.mkdir(parents=True)
    convert_file(onnx, target)
    (root / "var/log/ai-engine").mkdir(parents=True)

    log = tmp_path / "server.log"
    env = _kernel_env(npz_backend=False)
    with open(log, "wb") as out:
        proc = subprocess.Popen([*ai_engine(), "serve", "--config", str(config), "--root", str(root)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        url = f"127.0.0.1:{http_port}"
        wait_ready(proc, url, log)
        client = httpclient.InferenceServerClient(url=url)
        assert client.is_model_ready("mlp")
        session = zoo_mlp.session()
        rng = np.random.default_rng(17)
        for batch, binary in ((1, False), (4, True)):
            x = zoo_mlp.inputs(rng, batch)
            inp = httpclient.InferInput("input", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=binary)
            result = client.infer("mlp", [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=binary)])
            np.testing.assert_allclose(result.as_numpy("logits"), session.run(None, {"input": x})[0],
                                       rtol=1e-5, atol=1e-5)
        meta = client.get_model_metadata("mlp")
        assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 784]}]
        # The rendered log_dir, under the root, receives the request log.
        log_file = root / "var/log/ai-engine/engine.log"

        def answered() -> int:
            records = [json.loads(line) for line in log_file.read_text().splitlines()]
            return sum(r["event"] == "request" and r["status"] == 200 for r in records)
        wait_for(lambda: answered() >= 2, "two answered requests in the rendered log_dir's engine.log")
        assert answered() == 2
    finally:
        code = stop_process(proc)
    assert code == 0, log.read_text()
