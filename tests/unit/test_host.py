"""The host the kind runtime's checks read (xtask/host.py), and the unit suite's own guard
(tests/unit/conftest.py): a unit test never reads the machine it runs on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xtask.host import Host


def test_the_unit_suite_refuses_the_real_host():
    with pytest.raises(AssertionError, match=r"a unit test read the real host"):
        Host.real()


def test_the_unit_suite_gives_each_test_an_empty_home_and_none_of_the_users_settings():
    home = Path(os.environ["HOME"])
    assert list(home.iterdir()) == []
    assert not {"KUBECONFIG", "AGN_CACHE_DIR", "XDG_CACHE_HOME", "CONTAINERS_CONF"} & set(os.environ)


def test_a_fake_host_puts_its_files_under_its_root_and_its_tools_on_its_path(tmp_path):
    host = Host.fake(tmp_path, tools=("podman",), environ={"A": "1"}, nofile_hard=20000)
    assert host.path("/etc/containers/containers.conf") == tmp_path / "etc" / "containers" / "containers.conf"
    assert host.which("podman") == "/usr/bin/podman" and host.which("kind") is None
    assert host.environ == {"A": "1"} and host.nofile_hard() == 20000
