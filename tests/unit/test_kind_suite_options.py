"""The kind suite honours pytest-kind's --cluster-name and --keep-cluster (tests/kind/conftest.py):
the options reach the suite's names, and the env files it writes for another name load."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from xtask.envdef import load_env
from xtask.runtime.kind_host import kind_config_path

KIND_TESTS = Path(__file__).resolve().parents[1] / "kind"


def test_env_files_for_another_cluster_name_load(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(KIND_TESTS))
    spec = importlib.util.spec_from_file_location("kind_conftest_under_test", KIND_TESTS / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    conftest.env_files_for("agn-kind-t", tmp_path)
    env = load_env("agn-kind-t", envs_dir=tmp_path)
    assert (env.name, env.namespace) == ("agn-kind-t", "agn-example")
    assert kind_config_path("agn-kind-t", envs_dir=tmp_path).read_text().count("kind: Cluster") == 1


def test_cluster_name_reaches_the_suite_and_keep_cluster_is_accepted():
    probe = (
        "import kindenv\n"
        "def test_names():\n"
        "    assert (kindenv.ENV, kindenv.CONTEXT) == ('agn-kind-t', 'kind-agn-kind-t')\n"
    )
    # a collected module of the suite's folder sees the name: run one probe test beside it
    path = KIND_TESTS / "test_zz_name_probe.py"
    path.write_text(probe)
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(path),
                "--cluster-name",
                "agn-kind-t",
                "--keep-cluster",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=KIND_TESTS.parents[1],
        )
    finally:
        path.unlink()
    assert done.returncode == 0, done.stdout + done.stderr
