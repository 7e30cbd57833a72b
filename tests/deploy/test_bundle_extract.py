"""Extracting a bundle on a host whose Python has no tarfile extraction
filters (before 3.11.4, e.g. Debian 12's 3.11.2): the same refusals as the
'data' filter, checked by hand (engine.deploy.bundle.extract_checked)."""

from __future__ import annotations

import io
import tarfile

import pytest

from engine.deploy import DeployError
from engine.deploy.bundle import extract_checked


def _tar(path, members):
    with tarfile.open(path, "w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
    return tarfile.open(path)


def test_a_good_bundle_is_extracted(tmp_path):
    with _tar(tmp_path / "ok.tar", [("MANIFEST.json", "file", b"{}"), ("lib/a.txt", "file", b"a"),
                                    ("lib/b", "link", "a.txt")]) as tar:
        extract_checked(tar, tmp_path / "rel")
    assert (tmp_path / "rel/lib/b").read_text() == "a"


@pytest.mark.parametrize("member", [("../evil", "file", b"x"), ("/abs/evil", "file", b"x"),
                                    ("lib/up", "link", "../../outside")])
def test_members_landing_outside_are_refused_and_nothing_is_written(tmp_path, member):
    with _tar(tmp_path / "bad.tar", [("MANIFEST.json", "file", b"{}"), member]) as tar:
        with pytest.raises(DeployError, match="outside the release directory"):
            extract_checked(tar, tmp_path / "rel")
    assert not (tmp_path / "rel").exists() and not (tmp_path / "evil").exists()
