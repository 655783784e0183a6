"""docs/kubectl.md stays true: every ``$ kubectl`` line in it is run, as written, with the real
kubectl against an overlay the real operator wrote, with the names the doc uses.

Each command must exit 0 with nothing on stderr, and its output must match the lines the doc
shows under it, ``…`` standing for any text: every shown line once, in order, when the doc
shows no ``…``, else every output line matching one of the shown lines (a shard listing
has one line per shard). What the doc claims in prose is checked too: the index's digest list
equals the shards' own. And every resource a doc tells users to ``kubectl get`` or ``kubectl
describe`` is one the API server serves (the README once said ``overlayshards``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from test_operator import make_consumer, make_network, set_drain, states
from test_probe_fleet import create_pool

from agnprocs import wait_for
from xtask.cli.kubectl_plugin import plugin_args
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kubectl.md"
PROVIDERS = ["provider-one", "provider-two", "provider-three", "provider-four"]


def doc_commands() -> list[tuple[str, list[str]]]:
    """Each ``$ kubectl`` line of the doc's console blocks with the output lines shown after it."""
    out: list[tuple[str, list[str]]] = []
    in_console = False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            continue
        if not in_console:
            continue
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in shown.split("…")))


def matches(output: str, shown: list[str]) -> bool:
    lines = output.splitlines()
    if not any("…" in s for s in shown):
        return lines == shown
    patterns = [pattern(s) for s in shown]
    return bool(lines) and all(any(p.fullmatch(line) for p in patterns) for line in lines)


def overlay_commands() -> list[tuple[str, list[str]]]:
    """The doc's kubectl lines that read overlays (not the ``kubectl agn`` plugin's examples)."""
    return [(c, shown) for c, shown in doc_commands() if shlex.split(c)[1] != "agn"]


def test_the_doc_has_the_commands_it_promises():
    commands = [c for c, _ in overlay_commands()]
    assert len(commands) == 5
    assert {tuple(shlex.split(c)[:3]) for c in commands} == {
        ("kubectl", "get", "routingoverlay"),
        ("kubectl", "get", "routingoverlayshards"),
    }


def test_every_kubectl_agn_line_in_the_doc_is_one_the_plugin_accepts():
    lines = [shlex.split(c, comments=True) for c, _ in doc_commands() if shlex.split(c)[1] == "agn"]
    assert len(lines) == 3
    for argv in lines:
        translated = plugin_args(argv[2:])
        assert translated[0] in ("drains", "provider-drain", "status"), argv
        assert "--context" in translated or "--env" in translated, (argv, translated)


def test_every_kubectl_line_in_the_doc_works_on_a_real_sharded_overlay(kube, namespace, agn, control_plane):
    make_network(kube, namespace, "production")
    make_network(kube, namespace, "staging")  # its shards must not show up in production's
    base = agn.provider("pool")
    create_pool(kube, namespace, base, PROVIDERS, network="production")
    create_pool(kube, namespace, base, ["provider-s"], network="staging")
    make_consumer(kube, namespace, "consumer-a", network="production")
    make_consumer(kube, namespace, "consumer-b", network="production")
    make_consumer(kube, namespace, "consumer-s", network="staging")
    agn.operator("--probe-interval", "2", "--probe-timeout", "5", "--overlay-shards", "4")
    everyone = dict.fromkeys(PROVIDERS, "admitted")
    wait_for(lambda: states(kube, namespace, "consumer-a") == everyone, timeout=60, what="all admitted")
    set_drain(kube, namespace, "provider-one", True)
    drained = {**everyone, "provider-one": "existing_only"}
    for consumer in ("consumer-a", "consumer-b"):
        wait_for(lambda c=consumer: states(kube, namespace, c) == drained, timeout=60, what=f"{consumer} drained")
    wait_for(lambda: states(kube, namespace, "consumer-s") == {"provider-s": "admitted"}, what="staging admitted")

    kubectl = str(ensure_assets(build=False) / "kubectl")
    where = ["--kubeconfig", str(control_plane.kubeconfig), "--context", control_plane.context, "-n", namespace]
    outputs = {}
    for command, shown in overlay_commands():
        argv = shlex.split(command)
        assert argv[0] == "kubectl"
        done = subprocess.run([kubectl, *where, *argv[1:]], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
        assert matches(done.stdout, shown), (command, done.stdout, shown)
        outputs[command] = done.stdout
    index_digests, shard_digests = (o for c, o in outputs.items() if "{.digest}" in c or "{.spec.digest}" in c)
    assert index_digests == shard_digests and index_digests.count("production-netshard-") >= 1
    assert "staging" not in shard_digests


def named_resources() -> set[str]:
    """Every resource after ``kubectl get`` or ``kubectl describe`` in the README and docs/."""
    docs = [REPO / "README.md", REPO / "manifests" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = set()
    for path in docs:
        found |= set(re.findall(r"kubectl (?:get|describe) ([a-z][a-z.-]*)", path.read_text()))
    return found


def test_every_resource_the_docs_name_is_served(control_plane, namespace):
    kubectl = str(ensure_assets(build=False) / "kubectl")
    where = ["--kubeconfig", str(control_plane.kubeconfig), "--context", control_plane.context, "-n", namespace]
    resources = named_resources()
    assert {"routingoverlay", "routingoverlayshards", "events"} <= resources
    for resource in sorted(resources):
        done = subprocess.run(
            [kubectl, *where, "get", resource, "-o", "name"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"kubectl get {resource}: {done.stderr.strip()}"
