"""The unit suite runs on a host of its own, never on the one it happens to run on.

Every unit test gets an empty home of its own (``HOME``, the XDG folders, the tool's state,
cache and journal folders, ``KUBECONFIG``: nothing of the user's is read or written), and
:meth:`xtask.host.Host.real` fails: a test that would read this machine's container settings,
limits, ``/lib/modules`` or tools through the kind runtime's host checks must hand in a
:class:`xtask.host.Host` of its own. ``.ci/run`` also runs this suite on a bare host (empty
``HOME``, a ``PATH`` without podman, docker, kind and Go, no container settings) before it sets
the machine up, so what this file cannot catch is caught there.
"""

from __future__ import annotations

import pytest

from xtask.host import Host

# Variables that point the tool at a user's files or at this machine's setup.
_HOST_VARIABLES = (
    "KUBECONFIG",
    "KUBEBUILDER_ASSETS",
    "AGN_LLAMA_SERVER",
    "AGN_LLAMA_VOCAB",
    "AGN_CACHE_DIR",
    "AGN_XTASK_HOME",
    "AGN_XTASK_JOURNAL_DIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "KIND_EXPERIMENTAL_PROVIDER",
    "KIND_NODE_IMAGE",
    "DOCKER_HOST",
    "CONTAINER_HOST",
)


@pytest.fixture(autouse=True)
def _a_home_of_its_own(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    for name in _HOST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))


def _the_real_host() -> Host:
    raise AssertionError(
        "a unit test read the real host (Host.real()): give the code a Host of the test's own (Host.fake(root, ...))"
    )


@pytest.fixture(autouse=True)
def _no_real_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Host, "real", staticmethod(_the_real_host))
