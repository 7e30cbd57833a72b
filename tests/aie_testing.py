"""Helpers shared by tests in several folders (imported by name: a module
called `conftest` would be ambiguous, every folder may have one)."""

from __future__ import annotations

import os

import pytest


def require_root() -> None:
    """Skip (with the reason printed) when a test needs root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, sysctl, hugepages); run as root to cover this")
