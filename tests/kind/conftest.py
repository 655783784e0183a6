"""The kind suite's cluster fixture (helpers in tests/kind/kindenv.py).

pytest-kind's own options are honoured: ``--cluster-name NAME`` names the cluster and the env
(``envs/example.yaml`` and ``envs/kind-example.yaml`` copied under that name into the suite's
folder, ``AGN_XTASK_ENVS_DIR``; default ``example``), and ``--keep-cluster`` keeps the cluster
and its env after the suite (no ``env down``; end it with ``xtask env down --env NAME`` and the
``AGN_XTASK_HOME`` the suite prints).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import kindenv
import pytest
import yaml
from kindenv import REPO_ROOT, REQUIRED, KindEnv, problems

PYTEST_KIND_DEFAULT_NAME = "pytest-kind"  # pytest-kind's --cluster-name default: not given


def pytest_configure(config: pytest.Config) -> None:
    """The cluster's name from pytest-kind's --cluster-name, before the tests import it."""
    name = config.getoption("cluster_name", default=None)
    if name and name != PYTEST_KIND_DEFAULT_NAME:
        kindenv.use_env_name(name)


def env_files_for(name: str, folder: Path) -> None:
    """envs/example.yaml and envs/kind-example.yaml as the files of env ``name`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((REPO_ROOT / "envs" / "example.yaml").read_text())
    data["name"] = name
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copyfile(REPO_ROOT / "envs" / "kind-example.yaml", folder / f"kind-{name}.yaml")


@pytest.fixture(scope="module")
def kind_env(tmp_path_factory, pytestconfig) -> Iterator[KindEnv]:
    ENV = kindenv.ENV
    keep = bool(pytestconfig.getoption("keep_cluster", default=False))
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
    if ENV != "example":
        env_files_for(ENV, home / "envs")
        env["AGN_XTASK_ENVS_DIR"] = str(home / "envs")
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
        if keep:
            print(f"\nkept kind cluster {ENV!r}: AGN_XTASK_HOME={env['AGN_XTASK_HOME']} KUBECONFIG={env['KUBECONFIG']}")
        else:
            end(ENV, env, cluster)
        if saved is None:
            os.environ.pop("KIND_EXPERIMENTAL_PROVIDER", None)
        else:
            os.environ["KIND_EXPERIMENTAL_PROVIDER"] = saved


def end(name: str, env: dict[str, str], cluster) -> None:
    """``env down``; then, if the cluster is still there, pytest-kind deletes it."""
    subprocess.run(
        [sys.executable, "-m", "xtask", "env", "down", "--env", name],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=600,
    )
    still = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, timeout=60).stdout.split()
    if name in still:
        cluster.delete()
