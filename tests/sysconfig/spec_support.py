"""Writing spec files and collecting load_spec's problems, for the spec tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hostspec.errors import SpecError
from hostspec.loader import load_spec


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Work in tmp_path so problems name 'spec.yaml' as a user would see it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(dir_: Path, name: str, text: str) -> str:
    (dir_ / name).write_text(textwrap.dedent(text).lstrip("\n"))
    return name


def problems(*paths: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(list(paths))
    return [str(p) for p in info.value.problems]
