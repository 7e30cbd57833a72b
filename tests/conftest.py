"""Shared pytest configuration. Skips must say why: use pytest.skip(reason)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# `models` (the zoo) is a plain folder at the repo root, not an installed package.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def pytest_configure(config):
    config.addinivalue_line("markers", "op_test(*ops): the test checks these registered ops "
                            "(tests/runtime/test_op_coverage.py counts them as tested)")


def pytest_report_header(config):
    return [f"ai-engine repo: {REPO}", f"root: {os.geteuid() == 0}"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def zoo():
    """zoo(name) -> Path of build/models/<name>.onnx, generated once per session
    (and reused across sessions while its recipe is unchanged: models.zoo skips
    up-to-date files). digits also leaves digits.sample.{npy,json} beside it."""
    from models import zoo as model_zoo

    out_dir = REPO / "build" / "models"
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = model_zoo.ensure(name, out_dir)
        return built[name]

    return get


@pytest.fixture(scope="session", autouse=True)
def wheel_cache(tmp_path_factory):
    """One wheel cache (engine.deploy.wheelcache) for the session, in its tmp:
    deploys into fresh build dirs (the user path's clone, tests' own build
    dirs) share the wheels the first one built, the cold path still runs once
    per session, and the user's own cache is never read or written."""
    path = tmp_path_factory.mktemp("wheelcache")
    before = os.environ.get("AIE_CACHE_DIR")
    os.environ["AIE_CACHE_DIR"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("AIE_CACHE_DIR", None)
        else:
            os.environ["AIE_CACHE_DIR"] = before
