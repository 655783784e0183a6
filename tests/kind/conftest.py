"""The kind suite's cluster fixture (helpers in tests/kind/kindenv.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kindenv import ENV, REPO_ROOT, REQUIRED, KindEnv, problems


@pytest.fixture(scope="module")
def kind_env(tmp_path_factory) -> Iterator[KindEnv]:
    found = problems()
    if found:
        message = "the kind suite needs kind, kubectl and a container engine kind can use: " + "; ".join(found)
        if REQUIRED:
            pytest.fail(
                message + " (AGN_REQUIRE_KIND=1: this machine is expected to run it; scripts/kind-host-setup.sh)"
            )
        pytest.skip(message)
    from pytest_kind import KindCluster

    from xtask.engine import detect_engine
    from xtask.procs import RealCmdRunner

    # kind picks Docker whenever its CLI exists; every bare kind call here (the checks below,
    # pytest-kind's) must name the engine the runtime chose, as the runtime does.
    engine, _ = detect_engine(environ=os.environ, which=shutil.which, runner=RealCmdRunner())
    saved = os.environ.get("KIND_EXPERIMENTAL_PROVIDER")
    os.environ["KIND_EXPERIMENTAL_PROVIDER"] = str(engine)
    listed = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, timeout=60).stdout.split()
    if ENV in listed:
        pytest.fail(f"a kind cluster named {ENV!r} exists already; the suite only touches clusters it creates")
    home = tmp_path_factory.mktemp("kind")
    env = {
        **os.environ,
        "AGN_XTASK_HOME": str(home / "xtask"),
        "KUBECONFIG": str(home / "kubeconfig"),
        "PYTHONPATH": str(REPO_ROOT),
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    start = time.monotonic()
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "xtask",
            "env",
            "up",
            "--runtime",
            "kind",
            "--env",
            ENV,
            "--timeout",
            "300",
            "-o",
            "json",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - start
    # pytest-kind keeps its own files under ./.pytest-kind: make that the test's folder.
    here = os.getcwd()
    os.chdir(home)
    try:
        cluster = KindCluster(
            ENV,
            kubeconfig=home / "kubeconfig",
            kind_path=Path(shutil.which("kind") or "kind"),
            kubectl_path=Path(shutil.which("kubectl") or "kubectl"),
        )
    finally:
        os.chdir(here)
    try:
        assert up.returncode == 0, f"env up --runtime kind failed ({up.returncode}):\n{up.stderr[-4000:]}"
        cluster.create()  # the cluster exists: pytest-kind only connects to it
        yield KindEnv(env, home, cluster, json.loads(up.stdout), seconds)
    finally:
        subprocess.run(
            [sys.executable, "-m", "xtask", "env", "down", "--env", ENV],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            timeout=600,
        )
        still = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, timeout=60).stdout.split()
        if ENV in still:
            cluster.delete()
        if saved is None:
            os.environ.pop("KIND_EXPERIMENTAL_PROVIDER", None)
        else:
            os.environ["KIND_EXPERIMENTAL_PROVIDER"] = saved
