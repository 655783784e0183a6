"""`env up --runtime kind` on a host that lacks a setting privileged Podman nodes need: it
names the setting and the script that makes it, and changes nothing (no cluster, no state,
no kubeconfig). Runs where Podman is installed; needs no cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from kindenv import REPO_ROOT, REQUIRED

pytestmark = pytest.mark.kind


def test_a_missing_podman_setting_is_named_with_its_fix_and_nothing_changes(tmp_path):
    if shutil.which("podman") is None:
        if REQUIRED:
            pytest.fail("AGN_REQUIRE_KIND=1 but podman is not installed (scripts/kind-host-setup.sh)")
        pytest.skip("podman is not installed")
    empty = tmp_path / "containers.conf"
    empty.write_text("")  # podman's own defaults only: no open-file limit this host allows
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(empty),
        "KIND_EXPERIMENTAL_PROVIDER": "podman",
        "AGN_XTASK_HOME": str(tmp_path / "xtask"),
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "xtask", "env", "up", "--runtime", "kind", "--env", "example"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    hard = int(subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip() or 0)
    if hard >= 1048576:
        pytest.skip("this host allows podman's default open-file limit: nothing is missing to name")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "default_ulimits nofile" in proc.stderr and "scripts/kind-host-setup.sh" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "xtask").exists() and not (tmp_path / "kubeconfig").exists()
