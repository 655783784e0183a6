"""In a checkout the data folders and the state folder are the repository's (a wheel's are
checked by tests/e2e/test_wheel.py)."""

from __future__ import annotations

import pytest

from xtask import state
from xtask.resources import DATA_DIRS, data_dir


def test_in_a_checkout_the_data_folders_are_the_repositorys():
    for name in DATA_DIRS:
        assert data_dir(name) == state.REPO_ROOT / name and data_dir(name).is_dir()
    with pytest.raises(ValueError, match="'scripts' is not one of the data folders"):
        data_dir("scripts")


def test_in_a_checkout_the_state_folder_is_the_repositorys(monkeypatch):
    monkeypatch.delenv("AGN_XTASK_HOME", raising=False)
    assert state.state_root() == state.REPO_ROOT / ".xtask"
    monkeypatch.setenv("AGN_XTASK_HOME", "/elsewhere")
    assert str(state.state_root()) == "/elsewhere"
