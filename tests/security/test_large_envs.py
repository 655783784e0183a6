"""Large envs don't fork one process per provider (issue 22, "An env file with 10,000
providers starts one Python process per provider with no cap").

Env files are generated into a folder of the test (``AGN_XTASK_ENVS_DIR``). ``env up`` runs as
a subprocess under a guard that counts the processes it has started (its pid files) and stops
it — then ``env down`` cleans up — the moment there are more than the test allows, so a
regression fails fast instead of filling the machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agnprocs import wait_for
from envcli import REPO, Cli
from xtask.runtime.local import MAX_CONSUMERS, MAX_PROVIDERS, POOL, POOL_THRESHOLD

pytestmark = pytest.mark.e2e


def write_env(folder: Path, name: str, *, providers: int, consumers: int = 1) -> Path:
    """An env file with ``providers`` fake providers (one flow-style line each: small)."""
    folder.mkdir(exist_ok=True)
    lines = [
        f"name: {name}",
        f"namespace: agn-{name}",
        "networks:",
        "  - name: production",
        "    providerSelector: {matchLabels: {agn.dev/network: production}}",
        "    trust: {allowedSchemes: [http]}",
        "consumers:",
        *(f"  - {{name: consumer-{i}, network: production}}" for i in range(consumers)),
        "providers:",
        *(
            f"  - {{name: p{i:05d}, selectionGroup: g{i % 4}, rank: {i % 3}, labels: {{agn.dev/network: production}}}}"
            for i in range(providers)
        ),
    ]
    path = folder / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Run:
    """``env up`` of one env, stopped (and the env torn down) if it starts more than ``limit`` processes."""

    def __init__(self, tmp_path: Path, env: str) -> None:
        self.cli = Cli(tmp_path)
        self.cli.env["AGN_XTASK_ENVS_DIR"] = str(tmp_path / "envs")
        self.env = env
        self.run_dir = tmp_path / "state" / "envs" / env / "run"

    def pid_files(self) -> set[str]:
        return (
            {p.name.removesuffix(".pid.json") for p in self.run_dir.glob("*.pid.json")}
            if self.run_dir.exists()
            else set()
        )

    def up(self, *, limit: int) -> tuple[subprocess.CompletedProcess, set[str]]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "xtask", "env", "up", "--env", self.env, "--runtime", "local", "--timeout", "300"],
            cwd=REPO,
            env=self.cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        most: set[str] = set()

        def finished_or_over() -> bool:
            nonlocal most
            now = self.pid_files()
            most = now if len(now) > len(most) else most
            return proc.poll() is not None or len(now) > limit

        try:
            wait_for(finished_or_over, timeout=600, interval=0.05, what=f"env up --env {self.env}")
        finally:
            if proc.poll() is None:
                proc.kill()
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), most

    def down(self) -> subprocess.CompletedProcess:
        return self.cli("env", "down", "--env", self.env)


def test_a_large_env_is_served_by_one_provider_pool(tmp_path):
    providers = 200
    assert providers > POOL_THRESHOLD
    write_env(tmp_path / "envs", "big", providers=providers)
    run = Run(tmp_path, "big")
    expected = {"etcd", "kube-apiserver", POOL, "operator", "gateway-consumer-0"}
    if shutil.which("prometheus"):  # env up starts the env's Prometheus when it is installed
        expected.add("prometheus")
    try:
        up, most = run.up(limit=len(expected))
        assert most <= expected, f"more processes than expected: {len(most)}"
        assert up.returncode == 0, up.stdout + up.stderr
        assert run.pid_files() == expected
        status = run.cli("env", "status", "--env", "big", "--output", "json")
        assert status.returncode == 0, status.stderr
        objects = json.loads(status.stdout)["objects"]["providers"]
        assert len(objects) == providers
        assert {p["available"] for p in objects} == {"True"}
        assert {p["endpoint"].split("/pool/")[1] for p in objects} == {p["name"] for p in objects}
    finally:
        down = run.down()
    assert down.returncode == 0, down.stdout + down.stderr


@pytest.mark.parametrize(
    ("providers", "consumers", "what"),
    [(MAX_PROVIDERS + 1, 1, "providers"), (4, MAX_CONSUMERS + 1, "consumers")],
    ids=["providers", "consumers"],
)
def test_an_env_over_the_cap_is_refused_before_anything_starts(tmp_path, providers, consumers, what):
    path = write_env(tmp_path / "envs", "huge", providers=providers, consumers=consumers)
    run = Run(tmp_path, "huge")
    try:
        up, most = run.up(limit=0)
        assert most == set()
        assert up.returncode == 3, up.stdout + up.stderr
        count = providers if what == "providers" else consumers
        assert f"{path}: {count} {what}" in up.stderr and "Traceback" not in up.stderr
        assert not (tmp_path / "state").exists()
        assert not (tmp_path / "kubeconfig").exists()
    finally:
        if run.pid_files():
            run.down()
