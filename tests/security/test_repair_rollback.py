"""A failed repair changes nothing it cannot put back (issue 22, "A failed repair is not
rolled back"): ``env up`` on an env that is up, with an env file whose change fails a later
step, leaves the user's kubeconfig and ``env.json`` exactly as they were, and the env up."""

from __future__ import annotations

import shutil

import pytest
import yaml

from envcli import REPO, Cli

pytestmark = pytest.mark.e2e


def test_a_repair_failing_midway_leaves_the_context_and_record_as_they_were(tmp_path):
    envs = tmp_path / "envs"
    envs.mkdir()
    shutil.copy(REPO / "envs" / "example.yaml", envs / "example.yaml")
    cli = Cli(tmp_path)
    cli.env["AGN_XTASK_ENVS_DIR"] = str(envs)
    record = tmp_path / "state" / "envs" / "example" / "env.json"
    kubeconfig = tmp_path / "kubeconfig"
    try:
        up = cli("env", "up", "--env", "example", "--runtime", "local")
        assert up.returncode == 0, up.stdout + up.stderr
        before = {kubeconfig: kubeconfig.read_bytes(), record: record.read_bytes()}

        # A new namespace (the context's and the record's), and a network the API server
        # rejects when the env's objects are applied — after the namespace was created.
        env = yaml.safe_load((envs / "example.yaml").read_text())
        env["namespace"] = "agn-changed"
        env["networks"][0]["trust"] = {"allowedSchemes": ["ftp"]}
        (envs / "example.yaml").write_text(yaml.safe_dump(env))
        repair = cli("env", "up", "--env", "example", "--runtime", "local")
        assert repair.returncode == 1, repair.stdout + repair.stderr
        assert "allowedSchemes" in repair.stderr and "Traceback" not in repair.stderr

        assert {path: path.read_bytes() for path in before} == before
        status = cli.status()
        assert (status["state"], status["namespace"]) == ("up", "agn-example")
        assert all(c["running"] for c in status["components"])
    finally:
        down = cli("env", "down")
    assert down.returncode == 0, down.stdout + down.stderr
