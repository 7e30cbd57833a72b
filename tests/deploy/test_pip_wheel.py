"""The pip wheel a bundle carries: ensurepip's, else the distro's copy
(Debian's system Python has no ensurepip wheels; python3-pip-whl puts them
in /usr/share/python-wheels), else one clear error."""

from __future__ import annotations

import shutil

import pytest

from engine.deploy import DeployError, wheels


def test_the_distro_pip_wheel_serves_when_ensurepip_has_none(tmp_path):
    stripped, distro = tmp_path / "_bundled", tmp_path / "python-wheels"
    stripped.mkdir()
    distro.mkdir()
    real = wheels.pip_wheel()  # this Python's, from either place
    shutil.copy2(real, distro / real.name)
    assert wheels.pip_wheel((stripped, distro)) == distro / real.name


def test_no_pip_wheel_anywhere_is_one_clear_error(tmp_path):
    with pytest.raises(DeployError, match="no pip wheel to bundle") as err:
        wheels.pip_wheel((tmp_path / "none", tmp_path))
    assert "python3-pip-whl" in str(err.value) + str(getattr(err.value, "hint", ""))
