"""The engines suite: real llama.cpp servers (``llama-server``, built by
scripts/install-llama-server.sh) serving the tiny seeded model, probed by the real operator
against the real API server, drained through the real CLI.

Where the server is not built the suite skips with the reason and how to build it, unless
``AGN_REQUIRE_ENGINES=1`` (set by ``.ci/run``): then it fails, so a machine that can run it never
skips it quietly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xtask.llamacpp import assets
from xtask.llamacpp.model import ensure_model
from xtask.runtime.assets import cache_root

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))  # drainenv

from llamaprocs import LlamaServers  # noqa: E402  (tests/engines is on the path: rootdir conftest)

REQUIRED = os.environ.get("AGN_REQUIRE_ENGINES") == "1"


@pytest.fixture(scope="session")
def llama() -> assets.LlamaAssets:
    found = assets.find()
    if found is None:
        message = f"the engines suite needs llama-server: {assets.missing_hint()}"
        if REQUIRED:
            pytest.fail(message + " (AGN_REQUIRE_ENGINES=1: this machine is expected to run it)", pytrace=False)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def tiny_model(llama: assets.LlamaAssets) -> Path:
    return ensure_model(cache_root() / "engines" / "models", llama.vocab)


@pytest.fixture(autouse=True)
def _engine_first(llama: assets.LlamaAssets) -> None:
    """Skip (or fail) before any control plane or process is started for a test that cannot run."""


@pytest.fixture
def servers(llama: assets.LlamaAssets, tiny_model: Path, tmp_path: Path) -> Iterator[LlamaServers]:
    """llama-servers this test starts (tracked by pid), every one stopped after it."""
    procs = LlamaServers(tmp_path / "llama", llama, tiny_model)
    yield procs
    procs.stop_all()
