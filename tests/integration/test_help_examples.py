"""Every example ``env provider-drain --help`` shows runs, as shown, against the example env.

The example env's own objects (envs/example.yaml: network production, consumers consumer-a and
consumer-b, providers provider-one..four in gateways provider-a and provider-b) are applied in a
test namespace, with the real operator, two real consumer gateways and four fake providers. A
kubeconfig whose context is named ``local-example``, as `env up` names it, points at the test
API server with that namespace as its default: so each command line is run word for word, as a
subprocess, and must exit 0. ``env drains``' examples run the same way afterwards.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agn.kube import Kube
from agnprocs import AgnProcesses, wait_for
from drainenv import DrainEnv
from helpexamples import shown_examples
from xtask.envdef import load_env

pytestmark = pytest.mark.integration

CONTEXT = "local-example"  # the context every example names


def example_kubeconfig(source: Path, context: str, namespace: str, path: Path) -> Path:
    """``source``'s context ``context`` renamed to local-example, its default namespace ``namespace``."""
    config = yaml.safe_load(source.read_text())
    entry = next(c for c in config["contexts"] if c["name"] == context)
    config["contexts"] = [{"name": CONTEXT, "context": {**entry["context"], "namespace": namespace}}]
    config["current-context"] = CONTEXT
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def help_examples(env: dict[str, str], command: str) -> list[list[str]]:
    """The example command lines of ``python -m xtask env COMMAND --help``, as argv."""
    shown = subprocess.run(
        [sys.executable, "-m", "xtask", "env", command, "--help"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "100"},
        timeout=60,
        check=True,
    ).stdout
    out = []
    for argv in shown_examples(shown):
        assert argv[:5] == ["python", "-m", "xtask", "env", command], argv
        out.append([sys.executable, *argv[1:]])
    return out


@pytest.fixture
def example_env(kube: Kube, namespace: str, agn: AgnProcesses, control_plane, tmp_path: Path) -> DrainEnv:
    """envs/example.yaml's objects in ``namespace``, with its fake providers, the operator and the
    consumers' gateways; returned once both consumers serve every provider admitted."""
    envdef = load_env("example")
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path)
    endpoints = {p.name: agn.provider(p.name) for p in envdef.providers}
    for obj in envdef.network_objects() + envdef.consumer_objects() + envdef.provider_objects(endpoints):
        obj["metadata"]["namespace"] = namespace
        kube.apply(obj, namespace=namespace)
    agn.operator_with_health()
    for consumer in envdef.consumers:
        agn.gateway(consumer.name)
    wait_for(
        lambda: all(env.serving_all_admitted(c.name, len(envdef.providers)) for c in envdef.consumers),
        timeout=60,
        what="both consumers serving every provider admitted",
    )
    return env


def test_every_provider_drain_example_in_help_runs_as_shown(example_env: DrainEnv, control_plane, tmp_path):
    kubeconfig = example_kubeconfig(control_plane.kubeconfig, control_plane.context, example_env.ns, tmp_path / "kc")
    env = {
        **control_plane.env(),
        "KUBECONFIG": str(kubeconfig),
        "AGN_XTASK_JOURNAL_DIR": str(tmp_path / "journal"),
        "NO_COLOR": "1",
    }
    examples = help_examples(env, "provider-drain")
    assert len(examples) >= 3
    for argv in examples:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
        assert proc.returncode == 0, f"{argv[1:]}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # What the examples say they do: provider-one drained and undrained again, gateway provider-b drained.
    drained = {name for name in PROVIDERS if example_env.drain_value(name)}
    assert drained == {"provider-three", "provider-four"}

    for argv in help_examples(env, "drains"):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, f"{argv[1:]}: exit {proc.returncode}\n{proc.stderr}"
        assert ("provider-three" in proc.stdout) == ("--expired" not in argv)  # its holds do not expire


PROVIDERS = ("provider-one", "provider-two", "provider-three", "provider-four")
