"""Bad inputs, one table row each: flags, kubeconfigs, env files, journals, journal folders and
objects edited by hand.

Every row runs the real CLI (``python -m xtask``, or the real ``kubectl`` for hand edits) as a
subprocess against the real API server and asserts the exact exit code, a message naming the
bad input, no traceback, at most one ``error:`` line, and that nothing was written: the
resourceVersion of every AGN object in the shared namespace is unchanged, and no file under the
row's folder (its kubeconfig, env files, journal folder, state folder) was created, changed or
removed. The objects live in one namespace shared by all rows (nothing may change them).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Kube
from envcli import REPO, Cli
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.edges.planfile import PlanInputs, build_plan, plan_digest
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.e2e

CTX = "local-tests"
API = "agn.dev/v1alpha1"
PROVIDER_LAYOUT = {  # name: (gateway, group, rank, labels)
    "p-one": ("gw-a", "chat", 0, {"net": "yes"}),
    "p-two": ("gw-a", "embed", 0, {"net": "yes"}),
    "p-three": ("gw-b", "chat", 1, {"net": "yes"}),
    "p-four": ("gw-b", "embed", 1, {"net": "yes"}),
    "p-lonely": ("gw-c", "chat", 2, {}),  # not selected by network net
}


@dataclasses.dataclass
class World:
    kube: Kube
    ns: str
    kubeconfig: dict  # the control plane's kubeconfig, its context's namespace set to ns
    kubectl: str

    def snapshot(self) -> dict[str, str]:
        out = {}
        for res in (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS):
            for obj in self.kube.list(res, self.ns)[0]:
                out[f"{res.kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
        return out


@pytest.fixture(scope="module")
def world(control_plane):
    """One namespace of objects for every row: a network, consumers, providers, an overlay."""
    kube = control_plane.kube()
    ns = f"bad-inputs-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(ns)

    def create(res, name, spec, labels=None):
        meta = {"name": name, **({"labels": labels} if labels else {})}
        kube.create(res, ns, {"apiVersion": API, "kind": res.kind, "metadata": meta, "spec": spec})

    create(NETWORKS, "net", {"providerSelector": {"matchLabels": {"net": "yes"}}})
    create(NETWORKS, "other-net", {})
    for name, network in (("c-a", "net"), ("c-b", "net"), ("c-other", "other-net")):
        create(CONSUMERS, name, {"network": network})
    for name, (gw, group, rank, labels) in PROVIDER_LAYOUT.items():
        create(
            PROVIDERS,
            name,
            {"endpoint": f"http://127.0.0.1:9/{name}", "providerGateway": gw, "selectionGroup": group, "rank": rank},
            labels,
        )
    # c-a's overlay as the operator would publish it: p-one is chat's only admitted provider.
    create(
        OVERLAYS,
        "c-a",
        {
            "network": "net",
            "consumer": "c-a",
            "revision": 1,
            "digest": "d1",
            "candidates": [
                {
                    "id": "c-1",
                    "provider": "p-one",
                    "endpoint": "http://127.0.0.1:9/p-one",
                    "selectionGroup": "chat",
                    "rank": 0,
                    "admission_state": "admitted",
                },
                {
                    "id": "c-3",
                    "provider": "p-three",
                    "endpoint": "http://127.0.0.1:9/p-three",
                    "selectionGroup": "chat",
                    "rank": 1,
                    "admission_state": "existing_only",
                },
            ],
        },
    )
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["contexts"]:
        if c["name"] == CTX:
            c["context"]["namespace"] = ns
    yield World(kube, ns, config, str(ensure_assets(build=False) / "kubectl"))
    kube.delete_namespace(ns)
    kube.close()


# -- inputs -------------------------------------------------------------------------------------------
Content = str | bytes | Callable[[World], Any]


@dataclasses.dataclass(frozen=True)
class Row:
    argv: tuple[str, ...]  # after `python -m xtask` (or starting with "kubectl"); {ns} {tmp} {ctx} are replaced
    code: int
    message: str  # must appear in the output, after the same replacements
    files: dict[str, Content] = dataclasses.field(default_factory=dict)  # written under {tmp} before the run
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def kubeconfig_with(change: Callable[[dict], Any]) -> Callable[[World], str]:
    """The test kubeconfig, changed in place by ``change`` (its return value is ignored)."""

    def build(w: World) -> str:
        config = copy.deepcopy(w.kubeconfig)
        change(config)
        return yaml.safe_dump(config)

    return build


def context_body(config: dict) -> dict:
    return next(c for c in config["contexts"] if c["name"] == CTX)["context"]


def example_env(change: Callable[[dict], Any]) -> str:
    """envs/example.yaml, changed in place by ``change`` (its return value is ignored)."""
    data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    change(data)
    return yaml.safe_dump(data)


def provider_entry(**changes) -> Callable[[dict], None]:
    return lambda d: d["providers"][0].update(changes)


def journal(*, header: dict | None = None, records: tuple = (), ns: str = "{ns}") -> Callable[[World], str]:
    """A v2 journal of a drain of p-one (written), with header fields replaced."""

    def build(w: World) -> str:
        head = {
            "type": "header",
            "format": "agn.dev/drain-journal/v2",
            "operation": "op-bad",
            "context": CTX,
            "namespace": ns.replace("{ns}", w.ns),
            "request": "drain",
            "reason": None,
            "startedAt": "2026-12-01T00:00:00Z",
            "plan": [
                {
                    "provider": "p-one",
                    "previous": None,
                    "previousAnnotations": {},
                    "resourceVersion": "1",
                    "generation": 1,
                }
            ],
        }
        head.update(header or {})
        lines = [
            head,
            {"type": "intent", "provider": "p-one", "resourceVersion": "1", "generation": 1},
            *(records or ({"type": "done", "provider": "p-one", "generation": 2},)),
        ]
        return "".join(json.dumps(rec) + "\n" for rec in lines)

    return build


def legacy(**fields) -> str:
    obj = {
        "operation": "op-old",
        "context": CTX,
        "namespace": "ns",
        "request": "drain",
        "state": "applying",
        "providers": {
            "p-one": {
                "previous": None,
                "resourceVersion": "1",
                "generation": 1,
                "written": True,
                "writtenGeneration": 2,
            }
        },
    }
    obj.update(fields)
    return json.dumps(obj)


def plan_of(*, change: Callable[[dict], Any] | None = None, redigest: bool = True) -> Callable[[World], str]:
    """A plan to drain p-one in the rows' namespace on the test cluster, changed by ``change``
    (then digested again unless ``redigest`` is false: an edited plan)."""

    def build(w: World) -> str:
        p_one = w.kube.get(PROVIDERS, w.ns, "p-one")
        doc = build_plan(
            PlanInputs(
                created_at=time.time(),
                created_by="me@here",
                context=CTX,
                cluster=w.kube.host,
                namespace=w.ns,
                request=DrainRequest(selector=Selector(provider="p-one"), drain=True),
                selected=[p_one],
                to_change=["p-one"],
                groups=[],
                budget=[],
                waves=[["p-one"]],
            )
        )
        if change is not None:
            change(doc)
            if redigest:
                doc["metadata"]["digest"] = plan_digest(doc)
        return yaml.safe_dump(doc)

    return build


DRAIN = ("env", "provider-drain")
P1 = (*DRAIN, "--provider", "p-one")
TARGETS = ("--network", "net", "--consumer", "c-a")
WAVES = (*P1, *TARGETS, "--wave-size", "1")
RESTORE = ("env", "drain-restore", "{tmp}/j.jsonl")
UP = ("env", "up", "--runtime", "local")
ENVS = {"AGN_XTASK_ENVS_DIR": "{tmp}/envs"}
KC = "{tmp}/kubeconfig"
GARBAGE_YAML = "apiVersion: v1\nclusters: [\n  - name: a\n"
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"


def usage(flag: str, value: str, why: str) -> Row:
    return Row((*P1, flag, value), 2, f"Invalid value for '{flag}': {why}")


ROWS: dict[str, Row] = {
    # -- flags: usage errors, nothing read --------------------------------------------------------------
    "qps-nan": usage("--qps", "nan", "'nan' is not a finite number"),
    "qps-inf": usage("--qps", "inf", "'inf' is not a finite number"),
    "qps-minus-inf": usage("--qps", "-inf", "'-inf' is not a finite number"),
    "qps-overflow": usage("--qps", "1e999", "'1e999' is not a finite number"),
    "qps-zero": usage("--qps", "0", "0.0 is not in the range x>=0.1"),
    "qps-word": usage("--qps", "fast", "'fast' is not a valid float"),
    "timeout-nan": usage("--timeout", "nan", "'nan' is not a duration"),
    "timeout-infinity": usage("--timeout", "Infinity", "'Infinity' is too long a duration"),
    "timeout-too-short": usage("--timeout", "0.5", "'0.5' is shorter than 1 second"),
    "timeout-negative": usage("--timeout", "-3", "'-3' is a negative duration"),
    "concurrency-zero": Row((*P1, "--concurrency", "0"), 2, "--concurrency must be between 1 and 64"),
    "concurrency-too-many": Row((*P1, "--concurrency", "65"), 2, "--concurrency must be between 1 and 64"),
    "concurrency-word": usage("--concurrency", "many", "'many' is not a valid integer"),
    "no-selection": Row(DRAIN, 2, "exactly one of --provider or --gateway is required"),
    "both-selections": Row((*P1, "--gateway", "gw-a"), 2, "exactly one of --provider or --gateway is required"),
    "empty-provider": Row(
        (*DRAIN, "--provider", ""), 2, "Invalid value for '--provider': '' is not a valid provider name"
    ),
    "empty-gateway": Row((*DRAIN, "--gateway", ""), 2, "--provider/--gateway needs a non-empty value"),
    # -- names: what is not a Kubernetes name is a usage error, before any file or API access ----------------
    "drain-namespace-dot": Row(
        (*P1, "--namespace", "."), 2, "Invalid value for '--namespace' / '-n': '.' is not a valid"
    ),
    "drain-namespace-newline": Row((*P1, "--namespace", "{ns}\n"), 2, "'{ns}\\n' is not a valid namespace"),
    "drain-provider-escaped-slash": Row(
        (*DRAIN, "--provider", "p-one%2Fstatus"), 2, "'p-one%2Fstatus' is not a valid provider name"
    ),
    "drain-provider-subresource": Row((*DRAIN, "--provider", "p-one/status"), 2, "'p-one/status' is not a valid"),
    "drain-consumer-dot-dot": Row((*P1, "--network", "net", "--consumer", ".."), 2, "'..' is not a valid consumer"),
    "render-bad-namespace": Row(("env", "render", "--namespace", "Bad_NS"), 2, "'Bad_NS' is not a valid namespace"),
    "status-env-traversal": Row(("env", "status", "--env", "../x"), 2, "'../x' is not a valid environment name"),
    "down-env-dot": Row(("env", "down", "--env", "."), 2, "'.' is not a valid environment name"),
    "down-env-empty": Row(("env", "down", "--env", ""), 2, "'' is not a valid environment name"),
    "down-env-too-long": Row(("env", "down", "--env", "x" * 300), 2, "(300 characters) is not a valid environment"),
    "status-home-is-a-file": Row(
        ("env", "status"),
        1,
        "cannot use {tmp}/f as the xtask state folder (AGN_XTASK_HOME): it is not a folder",
        files={"f": "x"},
        env={"AGN_XTASK_HOME": "{tmp}/f"},
    ),
    "network-without-consumer": Row((*P1, "--network", "net"), 2, "--network and --consumer go together"),
    "consumer-without-network": Row((*P1, "--consumer", "c-a"), 2, "--network and --consumer go together"),
    "reason-on-undrain": Row((*P1, "--undrain", "--reason", "x"), 2, "--reason records why a provider is drained"),
    # -- drain holders: --holder, --ticket, --expires-in, --release-all; env drains -----------------------------
    "holder-empty": usage("--holder", "", "'' is empty"),
    "holder-blank": usage("--holder", "   ", "'   ' is empty"),
    "holder-escape": usage("--holder", "ann\x1b[2J", "'ann\\x1b[2J' has characters that are not printable"),
    "holder-newline": usage("--holder", "ann\nbob", "'ann\\nbob' has characters that are not printable"),
    "holder-too-long": Row((*P1, "--holder", "h" * 200), 2, "'" + "h" * 56 + "... is longer than 128 characters (200)"),
    "holder-padded": usage("--holder", " ann", "' ann' starts or ends with a space"),
    "ticket-empty": usage("--ticket", "", "'' is empty"),
    "ticket-escape": usage("--ticket", "T-1\x07", "'T-1\\x07' has characters that are not printable"),
    "ticket-too-long": Row(
        (*P1, "--ticket", "t" * 300), 2, "Invalid value for '--ticket': '" + "t" * 56 + "... is longer than 128"
    ),
    "ticket-on-undrain": Row(
        (*P1, "--undrain", "--ticket", "T-1"), 2, "--ticket is recorded with the caller's hold on a drain"
    ),
    "expires-in-zero": usage("--expires-in", "0", "'0' is not a positive duration"),
    "expires-in-negative": usage("--expires-in", "-5", "'-5' is a negative duration"),
    "expires-in-word": usage("--expires-in", "soon", "'soon' is not a duration"),
    "expires-in-fraction": usage("--expires-in", "1.5s", "'1.5s' is not a whole number of seconds"),
    "expires-in-unit": usage("--expires-in", "2w", "'2w' is not a duration"),
    "expires-in-too-long": usage("--expires-in", "400d", "'400d' is longer than 366 days"),
    "expires-in-on-undrain": Row(
        (*P1, "--undrain", "--expires-in", "1h"), 2, "--expires-in is recorded with the caller's hold on a drain"
    ),
    "release-all-on-drain": Row(
        (*P1, "--release-all"), 2, "--release-all removes every holder's hold on --undrain; it does not apply"
    ),
    # -- slow start on return: --undrain --slow-start DURATION (1s..1h, whole seconds) ---------------------------
    "slow-start-on-drain": Row(
        (*P1, "--slow-start", "60s"), 2, "--slow-start ramps the share of providers an undrain returns"
    ),
    "slow-start-zero": Row((*P1, "--undrain", "--slow-start", "0"), 2, "'0' is not a positive duration"),
    "slow-start-word": Row((*P1, "--undrain", "--slow-start", "gently"), 2, "'gently' is not a duration"),
    "slow-start-fraction": Row(
        (*P1, "--undrain", "--slow-start", "1.5s"), 2, "'1.5s' is not a whole number of seconds"
    ),
    "slow-start-too-long": Row((*P1, "--undrain", "--slow-start", "2h"), 2, "'2h' is longer than 1 hour"),
    "slow-start-negative": Row((*P1, "--undrain", "--slow-start", "-5"), 2, "'-5' is a negative duration"),
    # -- sessions that end on purpose: --session-deadline DURATION (1s..24h, whole seconds), --wait-sessions QUIET
    "session-deadline-on-undrain": Row(
        (*P1, "--undrain", "--session-deadline", "10s"), 2, "--session-deadline moves the sessions of providers"
    ),
    "session-deadline-zero": Row((*P1, "--session-deadline", "0"), 2, "'0' is not a positive duration"),
    "session-deadline-word": Row((*P1, "--session-deadline", "soon"), 2, "'soon' is not a duration"),
    "session-deadline-fraction": Row((*P1, "--session-deadline", "2.5s"), 2, "'2.5s' is not a whole number of seconds"),
    "session-deadline-too-long": Row((*P1, "--session-deadline", "2d"), 2, "'2d' is longer than 1 day"),
    "session-deadline-negative": Row((*P1, "--session-deadline", "-5"), 2, "'-5' is a negative duration"),
    "wait-sessions-on-undrain": Row(
        (*P1, *TARGETS, "--undrain", "--wait-sessions", "5"), 2, "--wait-sessions waits for drained providers'"
    ),
    "wait-sessions-without-targets": Row(
        (*P1, "--wait-sessions", "5"), 2, "--wait-sessions reads the consumers' session reports"
    ),
    "wait-sessions-zero": Row((*P1, *TARGETS, "--wait-sessions", "0"), 2, "'0' is not a positive duration"),
    "wait-sessions-too-long": Row((*P1, *TARGETS, "--wait-sessions", "2h"), 2, "'2h' is longer than 1 hour"),
    "wait-sessions-word": Row((*P1, *TARGETS, "--wait-sessions", "quiet"), 2, "'quiet' is not a duration"),
    "sessions-timeout-without-wait-sessions": Row(
        (*P1, *TARGETS, "--sessions-timeout", "60"), 2, "--sessions-timeout bounds the wait of --wait-sessions"
    ),
    "drains-bad-namespace": Row(("env", "drains", "--namespace", "Bad_NS"), 2, "'Bad_NS' is not a valid namespace"),
    "drains-output-xml": Row(
        ("env", "drains", "-o", "xml"),
        2,
        "Invalid value for '--output' / '-o': 'xml' is not one of 'table', 'wide', 'json', 'yaml', 'name'",
    ),
    # -o as kubectl's: exit 2 naming the value and the choices (each command's own).
    "status-output-xml": Row(
        ("env", "status", "-o", "xml"),
        2,
        "Invalid value for '--output' / '-o': 'xml' is not one of 'table', 'wide', 'json', 'yaml', 'name'",
    ),
    "up-output-wide": Row(
        (*UP, "-o", "wide"),
        2,
        "Invalid value for '--output' / '-o': 'wide' is not one of 'table', 'json', 'yaml', 'name'",
    ),
    "down-output-empty": Row(
        ("env", "down", "-o", ""),
        2,
        "Invalid value for '--output' / '-o': '' is not one of 'table', 'json', 'yaml', 'name'",
    ),
    "render-output-table": Row(
        ("env", "render", "-o", "table"),
        2,
        "Invalid value for '--output' / '-o': 'table' is not one of 'yaml', 'json', 'name'",
    ),
    "drain-restore-output-xml": Row(
        ("env", "drain-restore", "{tmp}/j.jsonl", "-o", "xml"),
        2,
        "Invalid value for '--output' / '-o': 'xml' is not one of 'table', 'json', 'yaml', 'name'",
        files={"j.jsonl": journal()},
    ),
    "output-escape": Row(
        (*P1, "-o", "json\x1b[2J"), 2, "Invalid value for '--output' / '-o': 'json\\x1b[2J' is not one of"
    ),
    "drains-expired-with-value": Row(("env", "drains", "--expired", "yes"), 2, "Got unexpected extra argument (yes)"),
    "wait-idle-on-undrain": Row(
        (*P1, *TARGETS, "--undrain", "--wait-idle"), 2, "--wait-idle waits for drained providers to go idle"
    ),
    "wait-idle-without-targets": Row((*P1, "--wait-idle"), 2, "--wait-idle runs once the drain is serving"),
    "idle-timeout-without-wait-idle": Row(
        (*P1, *TARGETS, "--idle-timeout", "60"), 2, "--idle-timeout bounds the wait of --wait-idle"
    ),
    "idle-timeout-nan": Row(
        (*P1, *TARGETS, "--wait-idle", "--idle-timeout", "nan"),
        2,
        "Invalid value for '--idle-timeout': 'nan' is not a duration",
    ),
    "idle-timeout-negative": Row(
        (*P1, *TARGETS, "--wait-idle", "--idle-timeout", "-5"),
        2,
        "Invalid value for '--idle-timeout': '-5' is a negative duration",
    ),
    # -- waves: --wave-size, --soak, --max-error-ratio, --on-breach, --consumer-gateway-metrics (and its older name --gateway-metrics), --resume -----------------
    "wave-size-word": usage("--wave-size", "half", "'half' is not a count (N) or a percentage (P%)"),
    "wave-size-negative": usage("--wave-size", "-2", "'-2' is not a count (N) or a percentage (P%)"),
    "wave-size-over-100-percent": usage("--wave-size", "150%", "'150%' is more than 100%"),
    "wave-size-without-targets": Row(
        (*P1, "--wave-size", "1"), 2, "--wave-size: each wave must converge on its targets before it soaks"
    ),
    "soak-nan": usage("--soak", "nan", "'nan' is not a duration"),
    "soak-negative": usage("--soak", "-1", "'-1' is a negative duration"),
    "soak-word": usage("--soak", "long", "'long' is not a duration"),
    "soak-without-waves": Row((*P1, *TARGETS, "--soak", "5"), 2, "--soak applies to a drain in waves"),
    "max-error-ratio-over-one": usage("--max-error-ratio", "1.5", "1.5 is not in the range 0<=x<=1"),
    "max-error-ratio-negative": usage("--max-error-ratio", "-0.1", "-0.1 is not in the range 0<=x<=1"),
    "max-error-ratio-nan": usage("--max-error-ratio", "nan", "'nan' is not a finite number"),
    "max-error-ratio-percent": usage("--max-error-ratio", "5%", "'5%' is not a valid float"),
    "max-error-ratio-without-waves": Row(
        (*P1, *TARGETS, "--max-error-ratio", "0.1"), 2, "--max-error-ratio applies to a drain in waves"
    ),
    "on-breach-word": usage("--on-breach", "keep", "'keep' is not one of 'hold', 'restore'"),
    "on-breach-without-waves": Row(
        (*P1, *TARGETS, "--on-breach", "restore"), 2, "--on-breach applies to a drain in waves"
    ),
    # --gate-promql EXPR --prometheus URL: checked before anything is read
    "gate-promql-without-prometheus": Row(
        (*WAVES, "--gate-promql", "vector(1)"), 2, "--gate-promql and --prometheus go together"
    ),
    "prometheus-without-gate-promql": Row(
        (*WAVES, "--prometheus", "http://127.0.0.1:9090"), 2, "--gate-promql and --prometheus go together"
    ),
    "gate-promql-empty": Row(
        (*WAVES, "--gate-promql", " ", "--prometheus", "http://127.0.0.1:9090"),
        2,
        "--gate-promql: the expression is empty",
    ),
    "gate-promql-control-characters": Row(
        (*WAVES, "--gate-promql", "up\x1b[2J", "--prometheus", "http://127.0.0.1:9090"),
        2,
        "has characters that are not printable",
    ),
    "prometheus-not-http": Row(
        (*WAVES, "--gate-promql", "vector(1)", "--prometheus", "file:///etc/passwd"),
        2,
        "not an http(s) URL with a host",
    ),
    "prometheus-with-query": Row(
        (*WAVES, "--gate-promql", "vector(1)", "--prometheus", "http://127.0.0.1:9090/?x=1"),
        2,
        "a Prometheus URL has no query or fragment",
    ),
    "gate-promql-without-a-soak": Row(
        (*WAVES, "--soak", "0", "--gate-promql", "vector(1)", "--prometheus", "http://127.0.0.1:9090"),
        2,
        "--gate-promql is read over each soak: it needs a --soak above 0",
    ),
    "gate-promql-without-waves": Row(
        (*P1, *TARGETS, "--gate-promql", "vector(1)", "--prometheus", "http://127.0.0.1:9090"),
        2,
        "--gate-promql, --prometheus applies to a drain in waves",
    ),
    "gateway-metrics-not-a-pair": Row(
        (*WAVES, "--gateway-metrics", "c-a"), 2, "--consumer-gateway-metrics: 'c-a' is not CONSUMER=URL"
    ),
    "gateway-metrics-not-http": Row(
        (*WAVES, "--consumer-gateway-metrics", "c-a=file:///etc/passwd"), 2, "is not an http:// or https:// URL"
    ),
    "gateway-metrics-twice": Row(
        (*WAVES, "--consumer-gateway-metrics", "c-a=http://127.0.0.1:1", "--gateway-metrics", "c-a=http://127.0.0.1:2"),
        2,
        "consumer 'c-a' is given twice",
    ),
    "gateway-metrics-not-a-target": Row(
        (*WAVES, "--consumer-gateway-metrics", "c-b=http://127.0.0.1:1/metrics"),
        2,
        "--consumer-gateway-metrics names c-b, which is not a --consumer of this drain",
    ),
    "gateway-metrics-without-waves": Row(
        (*P1, *TARGETS, "--gateway-metrics", "c-a=http://127.0.0.1:1"),
        2,
        "--consumer-gateway-metrics applies to a drain",
    ),
    "resume-missing-journal": Row(
        (*P1, *TARGETS, "--resume", "{tmp}/none.jsonl"), 2, "'{tmp}/none.jsonl' does not exist"
    ),
    "resume-journal-is-a-folder": Row((*P1, *TARGETS, "--resume", "{tmp}"), 2, "File '{tmp}' is a directory"),
    "resume-with-wave-size": Row(
        (*WAVES, "--resume", "{tmp}/j.jsonl"), 2, "do not give --wave-size with it", files={"j.jsonl": journal()}
    ),
    "resume-without-targets": Row(
        (*P1, "--resume", "{tmp}/j.jsonl"), 2, "--resume: each wave must converge", files={"j.jsonl": journal()}
    ),
    "resume-garbage-journal": Row(
        (*P1, *TARGETS, "--resume", "{tmp}/j.jsonl"),
        1,
        "{tmp}/j.jsonl: not a drain journal: expected JSON lines starting with a header object",
        files={"j.jsonl": "[]"},
    ),
    "resume-bad-wave-record": Row(
        (*P1, *TARGETS, "--resume", "{tmp}/j.jsonl"),
        1,
        "line 4: a wave record names wave 7, which is not one of the header's waves",
        files={
            "j.jsonl": journal(
                header={"waves": [["p-one"]]},
                records=(
                    {"type": "done", "provider": "p-one", "generation": 2},
                    {"type": "wave", "wave": 7, "state": "held"},
                ),
            )
        },
    ),
    "resume-journal-without-waves": Row(
        (*P1, *TARGETS, "--force", "--resume", "{tmp}/j.jsonl"),
        3,
        "the journal is not of a drain in waves",
        files={"j.jsonl": journal()},
    ),
    "output-xml": Row(
        (*P1, "--output", "xml"),
        2,
        "Invalid value for '--output' / '-o': 'xml' is not one of 'table', 'json', 'yaml', 'name'",
    ),
    "unknown-flag": Row((*P1, "--frobnicate"), 2, "No such option '--frobnicate'"),
    "journal-dir-is-a-file": Row(
        (*P1, "--journal-dir", "{tmp}/f"), 2, "Directory '{tmp}/f' is a file", files={"f": "x"}
    ),
    "up-timeout-nan": Row((*UP, "--timeout", "nan"), 2, "Invalid value for '--timeout': 'nan' is not a duration"),
    "up-unknown-runtime": Row(
        ("env", "up", "--runtime", "podman"), 2, "'podman' is not one of 'auto', 'kind', 'local'"
    ),
    "restore-missing-journal": Row(
        ("env", "drain-restore", "{tmp}/none.jsonl"), 2, "'{tmp}/none.jsonl' does not exist"
    ),
    "restore-journal-is-a-folder": Row(("env", "drain-restore", "{tmp}"), 2, "File '{tmp}' is a directory"),
    "restore-concurrency-zero": Row(
        (*RESTORE, "--concurrency", "0"), 2, "0 is not in the range 1<=x<=64", files={"j.jsonl": journal()}
    ),
    "drain-kubeconfig-is-a-folder": Row((*P1, "--kubeconfig", "{tmp}"), 2, "File '{tmp}' is a directory"),
    # -- kubeconfigs: exit 1, the file named, the file untouched ------------------------------------------
    "kubeconfig-garbage-yaml": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: not valid YAML (line 3, column 3: expected the node content, but found '-')",
        files={"kubeconfig": GARBAGE_YAML},
    ),
    "kubeconfig-binary": Row((*P1, "--dry-run"), 1, f"kubeconfig {KC}: not UTF-8 text", files={"kubeconfig": BINARY}),
    "kubeconfig-a-list": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: not a kubeconfig: expected a mapping at the top, got list",
        files={"kubeconfig": "- a\n- b\n"},
    ),
    "kubeconfig-a-word": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: not a kubeconfig: expected a mapping at the top, got 'hello'",
        files={"kubeconfig": "hello\n"},
    ),
    "kubeconfig-contexts-not-a-list": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: contexts must be a list, got 'local-tests'",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update(contexts="local-tests"))},
    ),
    "kubeconfig-context-without-name": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: contexts[0].name must be a non-empty string, got nothing (null)",
        files={"kubeconfig": kubeconfig_with(lambda c: c["contexts"][0].pop("name"))},
    ),
    "kubeconfig-duplicate-context": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: contexts[1].name: duplicate name 'local-tests' in contexts",
        files={"kubeconfig": kubeconfig_with(lambda c: c["contexts"].append(copy.deepcopy(c["contexts"][0])))},
    ),
    "kubeconfig-namespace-not-a-string": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: contexts[0].context.namespace must be a string, got 5",
        files={"kubeconfig": kubeconfig_with(lambda c: context_body(c).update(namespace=5))},
    ),
    "kubeconfig-current-context-a-list": Row(
        (*P1, "--dry-run"),
        1,
        f"kubeconfig {KC}: current-context must be a string, got list ['local-tests']",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update({"current-context": ["local-tests"]}))},
    ),
    "kubeconfig-missing-explicit": Row(
        (*P1, "--dry-run", "--kubeconfig", "{tmp}/nope"), 1, "kubeconfig {tmp}/nope: no such file"
    ),
    "kubeconfig-missing-env": Row(
        (*P1, "--dry-run"),
        1,
        "no kubeconfig: {tmp}/nope (from $KUBECONFIG) does not exist",
        env={"KUBECONFIG": "{tmp}/nope"},
    ),
    "kubeconfig-missing-env-list": Row(
        (*P1, "--dry-run"),
        1,
        "no kubeconfig: no file of $KUBECONFIG exists ({tmp}/a, {tmp}/b)",
        env={"KUBECONFIG": "{tmp}/a:{tmp}/b"},
    ),
    "kubeconfig-garbage-second-in-list": Row(
        (*P1, "--dry-run"),
        1,
        "kubeconfig {tmp}/second: not valid YAML",
        env={"KUBECONFIG": f"{KC}:{{tmp}}/second"},
        files={"kubeconfig": lambda w: yaml.safe_dump(w.kubeconfig), "second": "a: b: c\n"},
    ),
    "kubeconfig-unknown-context": Row(
        (*P1, "--dry-run", "--context", "nope"),
        1,
        f"context 'nope' not found in kubeconfig {KC} (contexts: local-tests)",
    ),
    "kubeconfig-no-current-context": Row(
        (*P1, "--dry-run"),
        1,
        f"no context: kubeconfig {KC} sets no current-context; pass --context",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update({"current-context": ""}))},
    ),
    "kubeconfig-current-context-dangling": Row(
        (*P1, "--dry-run"),
        1,
        f"context 'ghost' not found in kubeconfig {KC} (contexts: local-tests)",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update({"current-context": "ghost"}))},
    ),
    "kubeconfig-cluster-missing": Row(
        (*P1, "--dry-run"),
        1,
        f"context 'local-tests' names cluster 'local-tests', which is not in kubeconfig {KC}",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update(clusters=[]))},
    ),
    "kubeconfig-user-missing": Row(
        (*P1, "--dry-run"),
        1,
        f"context 'local-tests' names user 'local-tests', which is not in kubeconfig {KC}",
        files={"kubeconfig": kubeconfig_with(lambda c: c.update(users=[]))},
    ),
    "kubeconfig-server-missing": Row(
        (*P1, "--dry-run"),
        1,
        f"cluster 'local-tests' of context 'local-tests' has no server in kubeconfig {KC}",
        files={"kubeconfig": kubeconfig_with(lambda c: c["clusters"][0]["cluster"].pop("server"))},
    ),
    "kubeconfig-ca-not-base64": Row(
        (*P1, "--dry-run"),
        1,
        f"cluster 'local-tests' of context 'local-tests' in kubeconfig {KC}: certificate-authority-data is not base64",
        files={
            "kubeconfig": kubeconfig_with(
                lambda c: c["clusters"][0]["cluster"].update({"certificate-authority-data": "%%% not base64 %%%"})
            )
        },
    ),
    "kubeconfig-server-unreachable": Row(
        (*P1, "--dry-run"),
        1,
        "API server unreachable: HTTPSConnection(host='127.0.0.1', port=9)",
        files={
            "kubeconfig": kubeconfig_with(lambda c: c["clusters"][0]["cluster"].update(server="https://127.0.0.1:9"))
        },
    ),
    "up-garbage-kubeconfig": Row(UP, 1, f"kubeconfig {KC}: not valid YAML", files={"kubeconfig": GARBAGE_YAML}),
    "up-binary-kubeconfig": Row(UP, 1, f"kubeconfig {KC}: not UTF-8 text", files={"kubeconfig": BINARY}),
    "up-kubeconfig-a-list": Row(UP, 1, f"kubeconfig {KC}: not a kubeconfig", files={"kubeconfig": "[1, 2]\n"}),
    "restore-garbage-kubeconfig": Row(
        RESTORE, 1, f"kubeconfig {KC}: not valid YAML", files={"j.jsonl": journal(), "kubeconfig": GARBAGE_YAML}
    ),
    # -- env files: exit 1, file and field named, nothing started -------------------------------------------
    "env-empty": Row(UP, 1, "{tmp}/envs/example.yaml: the file is empty", env=ENVS, files={"envs/example.yaml": ""}),
    "env-binary": Row(UP, 1, "{tmp}/envs/example.yaml: not UTF-8 text", env=ENVS, files={"envs/example.yaml": BINARY}),
    "env-garbage-yaml": Row(
        UP, 1, "{tmp}/envs/example.yaml: not valid YAML (line 3", env=ENVS, files={"envs/example.yaml": GARBAGE_YAML}
    ),
    "env-a-list": Row(
        UP, 1, "(top level): must be a mapping, got list", env=ENVS, files={"envs/example.yaml": "- name: x\n"}
    ),
    "env-wrong-api-version": Row(
        UP,
        2,
        "apiVersion: must be xtask.agn.dev/v1alpha1, got 'xtask.agn.dev/v2'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(apiVersion="xtask.agn.dev/v2"))},
    ),
    "env-wrong-kind": Row(
        UP,
        2,
        "kind: must be Environment, got 'Cluster'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(kind="Cluster"))},
    ),
    "env-kind-without-api-version": Row(
        UP,
        2,
        "apiVersion: must be xtask.agn.dev/v1alpha1, got (missing)",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.pop("apiVersion"))},
    ),
    "env-kind-engine-unknown": Row(
        UP,
        1,
        "runtimes.kind.engine: must be one of docker, podman, got 'nerdctl'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(runtimes={"kind": {"engine": "nerdctl"}}))},
    ),
    "env-kind-node-image-escape": Row(
        UP,
        1,
        "runtimes.kind.nodeImage: must be an image reference, got '\\x1b[31mnode'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(runtimes={"kind": {"nodeImage": "\x1b[31mnode"}}))},
    ),
    "env-kind-unknown-field": Row(
        UP,
        1,
        "runtimes.kind.registry: unknown field (allowed: engine, nodeImage)",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(runtimes={"kind": {"registry": "x"}}))},
    ),
    "kind-node-image-variable-not-a-reference": Row(
        ("env", "up", "--runtime", "kind"),
        1,
        "KIND_NODE_IMAGE is not an image reference: 'node --privileged'",
        env={"KIND_NODE_IMAGE": "node --privileged"},
    ),
    "env-endpoint-bad-ipv6": Row(
        UP,
        1,
        "providers[0].endpoint: must be an http(s) URL, got 'ftp://[::1' (Invalid IPv6 URL)",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="ftp://[::1"))},
    ),
    "env-endpoint-ftp": Row(
        UP,
        1,
        "providers[0].endpoint: must be an http(s) URL, got 'ftp://h:21' (scheme 'ftp')",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="ftp://h:21"))},
    ),
    "env-endpoint-no-host": Row(
        UP,
        1,
        "providers[0].endpoint: must be an http(s) URL with a host, got 'http://:8080'",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="http://:8080"))},
    ),
    "env-endpoint-port-range": Row(
        UP,
        1,
        "providers[0].endpoint: must be an http(s) URL, got 'http://h:70000' (Port out of range",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="http://h:70000"))},
    ),
    "env-endpoint-port-word": Row(
        UP,
        1,
        "got 'http://h:http' (Port could not be cast to integer value as 'http')",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="http://h:http"))},
    ),
    "env-endpoint-no-scheme": Row(
        UP,
        1,
        "got '127.0.0.1:8080' (scheme 'missing')",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(endpoint="127.0.0.1:8080"))},
    ),
    "env-rank-word": Row(
        UP,
        1,
        "providers[0].rank: must be a non-negative integer, got 'first'",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(rank="first"))},
    ),
    "env-rank-bool": Row(
        UP,
        1,
        "providers[0].rank: must be a non-negative integer, got True",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(rank=True))},
    ),
    "env-provider-name-missing": Row(
        UP,
        1,
        "providers[0].name: is required",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d["providers"][0].pop("name"))},
    ),
    "env-provider-not-a-mapping": Row(
        UP,
        1,
        "providers[0]: must be a mapping, got 'provider-one'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d["providers"].__setitem__(0, "provider-one"))},
    ),
    "env-duplicate-provider": Row(
        UP,
        1,
        "providers: duplicate name 'provider-one'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d["providers"].append(copy.deepcopy(d["providers"][0])))},
    ),
    "env-unknown-network": Row(
        UP,
        1,
        "consumers[0].network: names unknown network 'staging' (known: production)",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d["consumers"][0].update(network="staging"))},
    ),
    "env-bad-namespace": Row(
        UP,
        1,
        "namespace: must be a DNS-1123 label (lowercase letters, digits, '-'), got 'AGN_Example'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(namespace="AGN_Example"))},
    ),
    "env-name-mismatch": Row(
        UP,
        1,
        "name: is 'other' but the file is for environment 'example'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(name="other"))},
    ),
    "env-unknown-field": Row(
        UP,
        1,
        "colour: unknown field",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(colour="red"))},
    ),
    "env-metrics-age-zero": Row(
        UP,
        1,
        "networks[0].metricsMaxAgeSeconds: must be a positive integer, got 0",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d["networks"][0].update(metricsMaxAgeSeconds=0))},
    ),
    "env-labels-not-strings": Row(
        UP,
        1,
        "providers[0].labels: must map strings to strings, got dict {'tier': 1}",
        env=ENVS,
        files={"envs/example.yaml": example_env(provider_entry(labels={"tier": 1}))},
    ),
    "env-file-is-a-folder": Row(
        UP,
        1,
        "{tmp}/envs/example.yaml: is a directory, not a regular file",
        env=ENVS,
        files={"envs/example.yaml/keep": ""},
    ),
    "env-bad-name-flag": Row(("env", "up", "--env", "Bad_Name"), 2, "'Bad_Name' is not a valid environment name"),
    "env-namespace-newline": Row(
        UP,
        1,
        "namespace: must be a DNS-1123 label (lowercase letters, digits, '-'), got 'agn-example\\n'",
        env=ENVS,
        files={"envs/example.yaml": example_env(lambda d: d.update(namespace="agn-example\n"))},
    ),
    # -- journals for drain-restore: exit 1, the journal named and unchanged ----------------------------------
    "journal-json-list": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: expected JSON lines starting with a header object",
        files={"j.jsonl": "[]"},
    ),
    "journal-json-string": Row(RESTORE, 1, "{tmp}/j.jsonl: not a drain journal", files={"j.jsonl": '"journal"'}),
    "journal-empty-object": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: expected JSON lines starting with a header object",
        files={"j.jsonl": "{}"},
    ),
    "journal-empty-file": Row(
        RESTORE, 1, "{tmp}/j.jsonl: not a drain journal: no complete header line", files={"j.jsonl": ""}
    ),
    "journal-binary": Row(RESTORE, 1, "{tmp}/j.jsonl: cannot read the drain journal", files={"j.jsonl": BINARY}),
    "journal-wrong-format": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: line 1: the first line is not a agn.dev/drain-journal/v2 header",
        files={"j.jsonl": journal(header={"format": "v0"})},
    ),
    "journal-plan-not-a-list": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: line 1: header.plan must be a list",
        files={"j.jsonl": journal(header={"plan": {"p-one": {}}})},
    ),
    "journal-generation-a-word": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: line 1: invalid literal for int() with base 10: 'x'",
        files={"j.jsonl": journal(header={"plan": [{"provider": "p-one", "generation": "x"}]})},
    ),
    "journal-previous-a-word": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: line 1: previous must be true, false or null",
        files={"j.jsonl": journal(header={"plan": [{"provider": "p-one", "previous": "yes"}]})},
    ),
    "journal-namespace-a-number": Row(
        RESTORE,
        1,
        "line 1: header.namespace must be a non-empty string",
        files={"j.jsonl": journal(header={"namespace": 5})},
    ),
    "journal-namespace-dot-dot": Row(
        RESTORE,
        1,
        "line 1: header.namespace must be a DNS-1123 label",
        files={"j.jsonl": journal(ns="..")},
    ),
    "journal-provider-subresource": Row(
        RESTORE,
        1,
        "line 1: header.plan names provider 'p-one/status', which is not a provider name",
        files={"j.jsonl": journal(header={"plan": [{"provider": "p-one/status", "generation": 1}]})},
    ),
    "journal-generation-infinite": Row(
        RESTORE,
        1,
        "line 1: Infinity is not a number a journal may hold",
        files={"j.jsonl": journal(header={"plan": [{"provider": "p-one", "generation": float("inf")}]})},
    ),
    "journal-request-unknown": Row(
        RESTORE,
        1,
        "line 1: header.request must be drain or undrain",
        files={"j.jsonl": journal(header={"request": "pause"})},
    ),
    "journal-foreign-provider": Row(
        RESTORE,
        1,
        "line 3: a done record names provider 'p-x', which is not in the plan",
        files={"j.jsonl": journal(records=({"type": "done", "provider": "p-x", "generation": 2},))},
    ),
    "journal-done-generation-word": Row(
        RESTORE,
        1,
        "line 3: invalid literal for int() with base 10: 'two'",
        files={"j.jsonl": journal(records=({"type": "done", "provider": "p-one", "generation": "two"},))},
    ),
    "journal-legacy-providers-list": Row(
        RESTORE,
        1,
        "not a drain journal: expected JSON lines starting with a header object",
        files={"j.jsonl": legacy(providers=[])},
    ),
    "journal-legacy-generation-word": Row(
        RESTORE,
        1,
        "not a drain journal: expected JSON lines starting with a header object",
        files={"j.jsonl": legacy(providers={"p-one": {"generation": "abc"}})},
    ),
    "journal-context-a-number": Row(
        RESTORE,
        1,
        "{tmp}/j.jsonl: not a drain journal: context must be a string, got 5",
        files={"j.jsonl": journal(header={"context": 5})},
    ),
    "journal-context-unknown": Row(
        RESTORE,
        1,
        f"context 'elsewhere' not found in kubeconfig {KC} (contexts: local-tests)",
        files={"j.jsonl": journal(header={"context": "elsewhere"})},
    ),
    "journal-namespace-missing": Row(
        RESTORE,
        1,
        "namespace 'gone-ns' from journal {tmp}/j.jsonl does not exist in context 'local-tests'; nothing was restored",
        files={"j.jsonl": journal(ns="gone-ns")},
    ),
    "journal-namespace-missing-dry-run": Row(
        (*RESTORE, "--dry-run"),
        1,
        "namespace 'gone-ns' from journal {tmp}/j.jsonl does not exist in context 'local-tests'",
        files={"j.jsonl": journal(ns="gone-ns")},
    ),
    # -- journal folders: exit 1 before any API request ------------------------------------------------------
    "journal-dir-in-proc": Row(
        (*P1, "--journal-dir", "/proc/agn-xtask/journal"),
        1,
        "cannot use /proc/agn-xtask/journal as the drain journal folder: No such file or directory",
    ),
    "journal-dir-below-a-file": Row(
        (*P1, "--journal-dir", "{tmp}/f/journal"),
        1,
        "cannot use {tmp}/f/journal as the drain journal folder: Not a directory",
        files={"f": "x"},
    ),
    "journal-dir-env-in-proc": Row(
        P1,
        1,
        "cannot use /proc/agn-xtask as the drain journal folder",
        env={"AGN_XTASK_JOURNAL_DIR": "/proc/agn-xtask"},
    ),
    "journal-dir-env-a-file": Row(
        P1,
        1,
        "cannot use {tmp}/f as the drain journal folder: it is not a folder",
        files={"f": "x"},
        env={"AGN_XTASK_JOURNAL_DIR": "{tmp}/f"},
    ),
    # -- objects edited by hand: what the API server refuses, and what the drain refuses ------------------------
    "edit-drain-a-string": Row(
        ("kubectl", "patch", "iprov", "p-one", "--type", "merge", "-p", '{"spec":{"trafficPolicy":{"drain":"yes"}}}'),
        1,
        'spec.trafficPolicy.drain: Invalid value: "string": spec.trafficPolicy.drain in body must be of type boolean',
    ),
    "edit-traffic-policy-a-string": Row(
        ("kubectl", "patch", "iprov", "p-one", "--type", "merge", "-p", '{"spec":{"trafficPolicy":"drain"}}'),
        1,
        "spec.trafficPolicy: Invalid value",
    ),
    "edit-slow-start-too-long": Row(
        (
            "kubectl",
            "patch",
            "iprov",
            "p-one",
            "--type",
            "merge",
            "-p",
            '{"spec":{"trafficPolicy":{"slowStart":{"startTime":"2024-01-01T00:00:00Z","durationSeconds":7200}}}}',
        ),
        1,
        "spec.trafficPolicy.slowStart.durationSeconds: Invalid value: 7200",
    ),
    "edit-session-deadline-not-a-time": Row(
        (
            "kubectl",
            "patch",
            "iprov",
            "p-one",
            "--type",
            "merge",
            "-p",
            '{"spec":{"trafficPolicy":{"sessionDeadline":"after lunch"}}}',
        ),
        1,
        "spec.trafficPolicy.sessionDeadline: Invalid value",
    ),
    "edit-consumer-sessions-too-many": Row(
        (
            "kubectl",
            "patch",
            "icons",
            "c-a",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "sessions": {
                            "providers": [{"provider": f"p{i}", "sessions": 1, "rehomed": 0} for i in range(101)]
                        }
                    }
                }
            ),
        ),
        1,
        "status.sessions.providers: Too many: 101: must have at most 100 items",
    ),
    "edit-rank-negative": Row(
        ("kubectl", "patch", "iprov", "p-two", "--type", "merge", "-p", '{"spec":{"rank":-1}}'),
        1,
        "spec.rank: Invalid value: -1: spec.rank in body should be greater than or equal to 0",
    ),
    "edit-capacity-zero": Row(
        ("kubectl", "patch", "iprov", "p-two", "--type", "merge", "-p", '{"spec":{"capacity":{"maxConcurrent":0}}}'),
        1,
        "spec.capacity.maxConcurrent: Invalid value: 0: spec.capacity.maxConcurrent in body should be greater than or "
        "equal to 1",
    ),
    "edit-capacity-a-string": Row(
        ("kubectl", "patch", "iprov", "p-two", "--type", "merge", "-p", '{"spec":{"capacity":{"maxConcurrent":"8"}}}'),
        1,
        'spec.capacity.maxConcurrent: Invalid value: "string": spec.capacity.maxConcurrent in body must be of type '
        "integer",
    ),
    "edit-capacity-fraction": Row(
        ("kubectl", "patch", "iprov", "p-two", "--type", "merge", "-p", '{"spec":{"capacity":{"maxConcurrent":2.5}}}'),
        1,
        "spec.capacity.maxConcurrent: Invalid value",
    ),
    "edit-endpoint-removed": Row(
        ("kubectl", "patch", "iprov", "p-two", "--type", "merge", "-p", '{"spec":{"endpoint":null}}'),
        1,
        "spec.endpoint: Required value",
    ),
    "edit-consumer-network-empty": Row(
        ("kubectl", "patch", "icons", "c-a", "--type", "merge", "-p", '{"spec":{"network":""}}'),
        1,
        "spec.network: Invalid value",
    ),
    "edit-network-max-age-zero": Row(
        ("kubectl", "patch", "inet", "net", "--type", "merge", "-p", '{"spec":{"metricsMaxAgeSeconds":0}}'),
        1,
        "spec.metricsMaxAgeSeconds: Invalid value",
    ),
    "edit-network-operator-unknown": Row(
        (
            "kubectl",
            "patch",
            "inet",
            "net",
            "--type",
            "merge",
            "-p",
            '{"spec":{"providerSelector":{"matchExpressions":[{"key":"net","operator":"Like"}]}}}',
        ),
        1,
        'spec.providerSelector.matchExpressions[0].operator: Unsupported value: "Like"',
    ),
    "edit-overlay-admission-state": Row(
        (
            "kubectl",
            "patch",
            "routingoverlays",
            "c-a",
            "--type",
            "json",
            "-p",
            '[{"op":"replace","path":"/spec/candidates/0/admission_state","value":"maybe"}]',
        ),
        1,
        'spec.candidates[0].admission_state: Unsupported value: "maybe"',
    ),
    "drain-unknown-provider": Row((*DRAIN, "--provider", "p-nope"), 3, "provider 'p-nope' not found in namespace {ns}"),
    "drain-unknown-gateway": Row(
        (*DRAIN, "--gateway", "gw-nope"), 3, "no provider in namespace {ns} has spec.providerGateway == 'gw-nope'"
    ),
    "drain-unknown-namespace": Row(
        (*P1, "--namespace", "ns-nope"), 3, "provider 'p-one' not found in namespace ns-nope"
    ),
    "drain-unknown-network": Row((*P1, "--network", "nope", "--consumer", "c-a"), 3, "network 'nope' not found"),
    "drain-unknown-consumer": Row((*P1, "--network", "net", "--consumer", "c-nope"), 3, "consumer 'c-nope' not found"),
    "drain-consumer-of-another-network": Row(
        (*P1, "--network", "net", "--consumer", "c-other"),
        3,
        "consumer 'c-other' belongs to network 'other-net', not 'net'",
    ),
    "drain-provider-not-selected": Row(
        (*DRAIN, "--provider", "p-lonely", "--network", "net", "--consumer", "c-a"),
        3,
        "provider 'p-lonely' is not selected by network 'net'",
    ),
    # -- plans (--plan-out, --plan, --max-plan-age) and budgets (--max-unavailable), --wave-size -----------
    "plan-out-unknown-extension": Row(
        (*P1, "--plan-out", "{tmp}/plan.txt"), 2, "--plan-out '{tmp}/plan.txt': name a .yaml, .yml or .json file"
    ),
    "plan-out-missing-folder": Row(
        (*P1, "--plan-out", "{tmp}/nope/plan.yaml"), 2, "the folder {tmp}/nope does not exist"
    ),
    "plan-out-is-a-folder": Row(
        (*P1, "--plan-out", "{tmp}"), 2, "Invalid value for '--plan-out': File '{tmp}' is a directory"
    ),
    "plan-out-empty": Row((*P1, "--plan-out", ""), 2, "an empty path names nothing"),
    "plan-missing": Row((*DRAIN, "--plan", "{tmp}/none.yaml"), 2, "'{tmp}/none.yaml' does not exist"),
    "plan-and-plan-out": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--plan-out", "{tmp}/q.yaml"),
        2,
        "--plan-out makes a plan and --plan applies one: give one of them",
        files={"p.yaml": plan_of()},
    ),
    "plan-with-a-selection-flag": Row(
        (*P1, "--plan", "{tmp}/p.yaml", "--undrain"),
        2,
        "--plan applies the plan's selection, operation and pacing: do not give --provider, --undrain with it",
        files={"p.yaml": plan_of()},
    ),
    "plan-with-release-all": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--release-all"),
        2,
        "--plan applies the plan's selection, operation and pacing: do not give --release-all with it",
        files={"p.yaml": plan_of()},
    ),
    "plan-with-another-holder": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--holder", "bob", "--ticket", "CHG-1"),
        2,
        "--plan applies the plan's selection, operation and pacing: do not give --holder, --ticket with it",
        files={"p.yaml": plan_of()},
    ),
    "plan-with-pacing-flags": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--soak", "9", "--concurrency", "8", "--max-error-ratio", "0.5"),
        2,
        "--plan applies the plan's selection, operation and pacing: do not give --soak, --concurrency, "
        "--max-error-ratio with it",
        files={"p.yaml": plan_of()},
    ),
    "plan-gate-value-its-flag-refuses": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "spec.pacing.gates.maxErrorRatio (--max-error-ratio): 2.0 is not in the range 0<=x<=1",
        files={"p.yaml": plan_of(change=lambda d: d["spec"]["pacing"]["gates"].update(maxErrorRatio=2))},
    ),
    "plan-gate-no-gate-takes": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "spec.pacing.gates.maxLatency: unknown field (no wave gate takes it)",
        files={"p.yaml": plan_of(change=lambda d: d["spec"]["pacing"]["gates"].update(maxLatency=1))},
    ),
    "plan-garbage-yaml": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "plan {tmp}/p.yaml: not a plan: not valid YAML (line 3",
        files={"p.yaml": GARBAGE_YAML},
    ),
    "plan-binary": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"), 3, "plan {tmp}/p.yaml: not a plan: not UTF-8 text", files={"p.yaml": BINARY}
    ),
    "plan-not-a-plan": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "plan {tmp}/p.yaml: not a valid ProviderDrainPlan: apiVersion is required",
        files={"p.yaml": "a: b\n"},
    ),
    "plan-wrong-field-type": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "spec.selection[0].resourceVersion must be a string, got 5",
        files={"p.yaml": plan_of(change=lambda d: d["spec"]["selection"][0].update(resourceVersion=5))},
    ),
    "plan-edited": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "its digest does not match its content",
        files={"p.yaml": plan_of(change=lambda d: d["spec"]["operation"].update(reason="edited"), redigest=False)},
    ),
    "plan-other-namespace": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--namespace", "elsewhere"),
        3,
        "plan {tmp}/p.yaml is for namespace {ns}, not elsewhere",
        files={"p.yaml": plan_of()},
    ),
    "plan-other-cluster": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml"),
        3,
        "the plan is for cluster https://elsewhere.example:6443, this context's is https://127.0.0.1:",
        files={"p.yaml": plan_of(change=lambda d: d["metadata"].update(cluster="https://elsewhere.example:6443"))},
    ),
    "plan-too-old": Row(
        (*DRAIN, "--plan", "{tmp}/p.yaml", "--max-plan-age", "30m"),
        3,
        "older than --max-plan-age 30m",
        files={"p.yaml": plan_of(change=lambda d: d["metadata"].update(createdAt="2020-01-01T00:00:00Z"))},
    ),
    "max-plan-age-spaced": usage("--max-plan-age", "1h 30m", "'1h 30m' is not a duration"),
    "max-plan-age-zero": usage("--max-plan-age", "0s", "'0s' is not a positive duration"),
    "max-plan-age-without-plan": Row(
        (*P1, "--max-plan-age", "1h"), 2, "--max-plan-age bounds the age of the plan given with --plan"
    ),
    "max-unavailable-negative": usage("--max-unavailable", "-1", "'-1' is not a count (N) or a percentage (P%)"),
    "max-unavailable-over-100-percent": usage("--max-unavailable", "101%", "'101%' is more than 100%"),
    "max-unavailable-word": usage("--max-unavailable", "few", "'few' is not a count"),
    "max-unavailable-on-undrain": Row(
        (*P1, "--undrain", "--max-unavailable", "1"), 2, "--max-unavailable bounds what a drain takes out"
    ),
    # -- the load-aware capacity guard: --capacity-margin ----------------------------------------------------
    "capacity-margin-negative": usage("--capacity-margin", "-2", "'-2' is not a count (N) or a percentage (P%)"),
    "capacity-margin-over-100-percent": usage("--capacity-margin", "150%", "'150%' is more than 100%"),
    "capacity-margin-fraction": usage("--capacity-margin", "2.5", "'2.5' is not a count (N) or a percentage (P%)"),
    "capacity-margin-word": usage("--capacity-margin", "some", "'some' is not a count"),
    "capacity-margin-on-undrain": Row(
        (*P1, "--undrain", "--capacity-margin", "2"), 2, "--capacity-margin weighs what a drain moves"
    ),
    # -- declared budgets and the drain lock: --override-budget, --lock-timeout ------------------------------
    "override-budget-empty": usage("--override-budget", "", "'' is empty: say why the budget is overridden"),
    "override-budget-blank": usage("--override-budget", "  ", "'  ' is empty"),
    "override-budget-escape": usage("--override-budget", "CHG\x07", "'CHG\\x07' has characters that are not printable"),
    "override-budget-too-long": Row(
        (*P1, "--override-budget", "o" * 300), 2, "'" + "o" * 56 + "... is longer than 256 characters (300)"
    ),
    "override-budget-on-undrain": Row(
        (*P1, "--undrain", "--override-budget", "why"), 2, "--override-budget sets a drain's budget aside"
    ),
    "lock-timeout-word": usage("--lock-timeout", "bogus", "'bogus' is not a duration"),
    "lock-timeout-zero": usage("--lock-timeout", "0", "'0' is not a positive duration"),
    "lock-timeout-negative": usage("--lock-timeout", "-5s", "'-5s' is not a duration"),
    "lock-timeout-too-long": usage("--lock-timeout", "2d", "'2d' is longer than 1 day"),
    "wave-size-zero": usage("--wave-size", "0", "'0' is less than 1"),
    "wave-size-zero-percent": usage("--wave-size", "0%", "'0%' is less than 1%"),
    "wave-size-fraction": usage("--wave-size", "1.5", "'1.5' is not a count"),
    "drain-capacity-guard": Row(
        (*P1, "--network", "net", "--consumer", "c-a"),
        3,
        "capacity guard: consumer c-a: selection group 'chat' would have no admitted provider (has 1 now)",
    ),
}


def _fill(text: str, w: World, tmp: Path) -> str:
    return text.replace("{ns}", w.ns).replace("{tmp}", str(tmp)).replace("{ctx}", CTX)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# Every time flag takes one duration type (xtask/durations.py): the same bad values, the same errors.
TIME_FLAGS = {
    "--timeout": P1,
    "--idle-timeout": P1,
    "--sessions-timeout": (*P1, *TARGETS, "--wait-sessions", "5"),
    "--soak": P1,
    "--max-plan-age": P1,
    "--expires-in": P1,
    "up --timeout": UP,
}
BAD_DURATIONS = {
    "unit": ("5x", "'5x' is not a duration"),
    "negative": ("-1s", "'-1s' is not a duration"),
    "nan": ("nan", "'nan' is not a duration"),
    "overflow": ("1e400", "'1e400' is too long a duration"),
    "empty": ("", "'' is not a duration"),
}
for _flag, _base in TIME_FLAGS.items():
    _name = _flag.split()[-1]
    for _kind, (_value, _why) in BAD_DURATIONS.items():
        ROWS[f"duration-{_flag.replace(' ', '').lstrip('-')}-{_kind}"] = Row(
            (*_base, _name, _value), 2, f"Invalid value for '{_name}': {_why}"
        )


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_bad_input(world: World, tmp_path: Path, row: Row):
    cli = Cli(tmp_path)
    files = {"kubeconfig": lambda w: yaml.safe_dump(w.kubeconfig), **row.files}
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content = content(world)
        if isinstance(content, str):
            content = _fill(content, world, tmp_path)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before_files, before_objects = _files(tmp_path), world.snapshot()

    argv = [_fill(a, world, tmp_path) for a in row.argv]
    env = {k: _fill(v, world, tmp_path) for k, v in row.env.items()}
    if argv[0] == "kubectl":
        proc = subprocess.run(
            [world.kubectl, "--kubeconfig", str(tmp_path / "kubeconfig"), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
    else:
        proc = cli(*argv, env=env, timeout=120)
    output = proc.stdout + proc.stderr

    assert proc.returncode == row.code, output
    assert _fill(row.message, world, tmp_path) in output
    assert "Traceback" not in output
    assert sum(line.lower().startswith("error:") for line in proc.stderr.splitlines()) <= 1, proc.stderr
    assert world.snapshot() == before_objects  # no AGN object was written
    assert _files(tmp_path) == before_files  # no file created, changed or removed (kubeconfig, journal, state)
    assert not (tmp_path / "state").exists()  # no env state


def test_enough_rows():
    assert len(ROWS) >= 60


# -- inputs that used to fail and must work, as kubectl reads them ---------------------------------------------
def test_explicit_context_without_current_context(world: World, tmp_path: Path):
    config = copy.deepcopy(world.kubeconfig)
    config["current-context"] = ""
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    proc = Cli(tmp_path)(*P1, "--dry-run", "--context", CTX)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == f"selection (provider p-one, namespace {world.ns}): p-one"


def test_kubeconfig_list_is_merged_first_file_wins(world: World, tmp_path: Path):
    """The context is only in the second file; the first file's stale cluster entry of the same
    name wins over the second's, exactly as kubectl resolves it."""
    second = tmp_path / "second"
    second.write_text(yaml.safe_dump(world.kubeconfig))
    first = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [], "current-context": ""}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(first))
    env = {"KUBECONFIG": f"{tmp_path / 'kubeconfig'}:{second}"}
    proc = Cli(tmp_path)(*P1, "--dry-run", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"namespace {world.ns}" in proc.stdout  # the context's namespace, from the second file

    first["clusters"] = [{"name": CTX, "cluster": {"server": "https://127.0.0.1:9"}}]
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(first))
    proc = Cli(tmp_path)(*P1, "--dry-run", env=env)
    assert proc.returncode == 1 and "127.0.0.1', port=9" in proc.stderr, proc.stderr
    kubectl = subprocess.run(
        [world.kubectl, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"],
        capture_output=True,
        text=True,
        env={**Cli(tmp_path).env, **env},
        timeout=60,
    )
    assert kubectl.stdout == "https://127.0.0.1:9"
