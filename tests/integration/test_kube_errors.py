"""Answers of a real API server that are about the connection, not an object, name the server and
the context first, then the request they answered (here the first one a drain sends, the
SelfSubjectReview that asks who it is): an https server addressed as http:// (400 to plain
HTTP), a rejected token (401).
``insecure-skip-tls-verify`` prints no urllib3 warning without ``-v``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from envcli import REPO

pytestmark = pytest.mark.integration


def xtask_with(control_plane, tmp_path, edit, *args: str) -> subprocess.CompletedProcess:
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    edit(config["clusters"][0]["cluster"], config["users"][0])
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "KUBECONFIG": str(path)}
    cmd = args or ("env", "provider-drain", "--provider", "p-one", "--dry-run", "--namespace", "default")
    return subprocess.run(
        [sys.executable, "-m", "xtask", *cmd], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def test_an_https_server_addressed_as_http(control_plane, tmp_path):
    http = control_plane.server.replace("https://", "http://")
    proc = xtask_with(control_plane, tmp_path, lambda c, u: c.update(server=http))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: API server {http} (context 'local-tests') answered 400 Bad Request to plain HTTP; "
        f"it probably expects {control_plane.server} (CREATE selfsubjectreviews)"
    ]


def test_a_rejected_token_names_the_server_and_the_context(control_plane, tmp_path):
    proc = xtask_with(control_plane, tmp_path, lambda c, u: u.update(user={"token": "not-a-token"}))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: API server {control_plane.server} (context 'local-tests') rejected the credentials: 401 Unauthorized "
        "(CREATE selfsubjectreviews)"
    ]


def test_insecure_skip_tls_verify_prints_no_warning(control_plane, tmp_path):
    def insecure(cluster, user):
        cluster.pop("certificate-authority-data")
        cluster["insecure-skip-tls-verify"] = True

    proc = xtask_with(control_plane, tmp_path, insecure)
    assert proc.returncode == 3, proc.stderr  # the provider does not exist: refused, after real requests
    assert "Warning" not in proc.stderr and "urllib3" not in proc.stderr, proc.stderr
