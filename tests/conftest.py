"""Shared pytest configuration. Skips must say why: use pytest.skip(reason)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_report_header(config):
    return [f"ai-engine repo: {REPO}", f"root: {os.geteuid() == 0}"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


def require_root() -> None:
    """Skip (with the reason printed) when a test needs root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, sysctl, hugepages); run as root to cover this")
