"""What the kind suite shares: constants, the CLI handle (:class:`KindEnv`) and a port-forward.

The cluster fixture itself is in tests/kind/conftest.py: one real kind cluster for the whole module, made by the CLI.

``env up --runtime kind --env example`` creates the cluster from nothing; the suite then holds
it through pytest-kind's :class:`pytest_kind.KindCluster` (given the ``kind`` and ``kubectl``
binaries by path, so it downloads nothing; its ``create`` reuses a cluster of that name), and
``env down`` ends it. The cluster is deleted through pytest-kind as well if ``env down``
failed, so a failing run leaves no cluster behind.

Where the kind runtime cannot run here the suite skips with the reason, unless
``AGN_REQUIRE_KIND=1`` (set by ``.ci/run``): then it fails, so a machine that can run it never
skips it quietly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from xtask.host import Host
from xtask.runtime.kind_host import kind_problems

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = "example"  # the cluster's and env's name; pytest-kind's --cluster-name changes it (conftest)
CONTEXT = f"kind-{ENV}"


def use_env_name(name: str) -> None:
    """Run the suite on env and cluster ``name`` (before the test modules import ENV and CONTEXT)."""
    global ENV, CONTEXT
    ENV, CONTEXT = name, f"kind-{name}"


NAMESPACE = "agn-example"
REQUIRED = os.environ.get("AGN_REQUIRE_KIND") == "1"


def problems() -> list[str]:
    return kind_problems(host=Host.real())


@dataclasses.dataclass
class KindEnv:
    """The CLI's environment for the suite, the cluster handle and what ``env up`` reported."""

    env: dict[str, str]
    home: Path
    cluster: object  # pytest_kind.KindCluster
    up_report: dict
    up_seconds: float

    def run(self, *args: str, timeout: float = 900, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "xtask", *args],
            cwd=REPO_ROOT,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "xtask", *args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def kubectl(self, *args: str) -> str:
        return self.cluster.kubectl("--context", CONTEXT, *args, timeout=120)  # type: ignore[attr-defined]

    def kubectl_json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json"))


class PortForward:
    """``kubectl port-forward`` to 127.0.0.1 on a port kubectl picks; stopped by pid."""

    def __init__(self, kind_env: KindEnv, target: str, remote_port: int) -> None:
        self.proc = subprocess.Popen(
            [
                "kubectl",
                "--context",
                CONTEXT,
                "--namespace",
                NAMESPACE,
                "port-forward",
                "--address",
                "127.0.0.1",
                target,
                f":{remote_port}",
            ],
            env=kind_env.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080"
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not found:
            self.stop()
            raise AssertionError(f"kubectl port-forward {target} said {line!r}: {self.proc.stderr.read()[-500:]}")
        self.port = int(found.group(1))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
