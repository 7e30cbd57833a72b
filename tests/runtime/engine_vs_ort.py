"""The one helper every runtime correctness test uses (engine vs
onnxruntime), and the zoo fixtures (models built once per session). Not a
conftest.py: tests/ already has one that other test folders import by name."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def zoo_model(zoo_dir):
    from models import zoo

    def build(name: str) -> Path:
        return zoo.ensure(name, zoo_dir)

    return build


def assert_matches_ort(model_path, feeds: dict, session) -> None:
    """Run feeds through the engine session and onnxruntime; compare."""
    import onnxruntime as ort

    got = session.run(None, feeds)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {k}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"output {k}")
