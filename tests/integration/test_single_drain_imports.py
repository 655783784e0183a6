"""What a single drain with targets imports: its import set may shrink, never grow unnoticed.

A single drain is the command run most often, and most of its wall time is process start (the
``kubernetes`` package alone is ~0.4 s of CPU here). Waves, gates, PromQL, plans, holds listing
and rich rendering load only when a flag asks for them. This runs the real CLI against the real
API server with ``python -X importtime`` and compares what it imported with the named lists
below; a module that joins the run must be added here, on purpose, in review.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from drainenv import DrainEnv
from reportschema import parse_report

pytestmark = pytest.mark.integration

# xtask's and agn's modules a single converged drain imports (its whole path: CLI, selection,
# dry run, journal, writes, Events, read-back, the convergence waiter), exactly: the list is what
# scripts/bench/drain_imports.py times as its own imports (xtask.__main__ runs as __main__).
OWN_MODULES = frozenset(
    """
    agn agn.credentials agn.engines agn.events agn.holds agn.inputfile agn.kube agn.kubeconfig
    agn.kubeconfig.read agn.kubeconfig.write agn.kubeconnect agn.kubeerrors agn.kubeobjects
    agn.kuberequest agn.kubetls agn.model agn.names agn.objects agn.operator agn.operator.heartbeat
    agn.operator.lease agn.outputfile agn.overlays agn.resources agn.shards agn.watching agn.yamltext
    xtask xtask.cli xtask.cli.complete xtask.cli.env xtask.cli.env.drain_options
    xtask.cli.env.drain_view xtask.cli.env.gate_options xtask.cli.env.option_groups
    xtask.cli.env.options xtask.cli.env.session_options xtask.cli.formats xtask.cli.helptext
    xtask.cli.output xtask.drain xtask.drain.context xtask.drain.core xtask.drain.core.amounts
    xtask.drain.core.budget xtask.drain.core.capacity xtask.drain.core.changes xtask.drain.core.converge
    xtask.drain.core.defaults xtask.drain.core.guard xtask.drain.core.holds xtask.drain.core.idle
    xtask.drain.core.journal_fields xtask.drain.core.journal_records xtask.drain.core.lock
    xtask.drain.core.progress xtask.drain.core.request xtask.drain.core.selection
    xtask.drain.core.states xtask.drain.edges xtask.drain.edges.fanout xtask.drain.edges.journal
    xtask.drain.edges.journal_staging xtask.drain.edges.kube_events xtask.drain.edges.lock
    xtask.drain.edges.members xtask.drain.edges.preflight xtask.drain.edges.targets
    xtask.drain.edges.waiter xtask.drain.finish xtask.drain.gates xtask.drain.gates.base
    xtask.drain.gates.flags xtask.drain.guards xtask.drain.guards.base xtask.drain.guards.budget
    xtask.drain.guards.capacity xtask.drain.guards.holds xtask.drain.guards.plan
    xtask.drain.guards.targets xtask.drain.locked xtask.drain.look xtask.drain.prepare
    xtask.drain.record xtask.drain.render xtask.drain.report xtask.drain.results xtask.drain.run
    xtask.drain.signals xtask.drain.snapshot xtask.drain.waveplan xtask.durations xtask.errors
    xtask.params xtask.pids xtask.record xtask.reports
    """.split()
)

# Third-party distributions (top-level import names) it may load: the CLI framework, the
# official client and what that client imports itself.
THIRD_PARTY = frozenset(
    """
    annotated_types backports bcrypt blinker brotli brotlicffi certifi chardet charset_normalizer
    click cryptography dateutil durationpy google idna kubernetes kubernetes_validate oauthlib
    org pydantic pydantic_core python_socks requests requests_oauthlib simplejson sitecustomize
    socks tenacity tornado typing_extensions typing_inspection urllib3 websocket wsaccel yaml
    """.split()
)

# Never on a single drain's path: gates' parsers, terminal UI off a terminal, plan documents,
# the help's layout (cloup: loaded only to show --help, xtask/cli/env/option_groups.py), and the
# client's typed authentication API and its models (~20 ms of CPU before the first request: the
# caller's identity is asked through the custom-objects API, agn/kube.py's who_am_i); what only a
# restoration, --resume, a plan, gates or --wait-idle use (loaded where they are; their progress
# events too, xtask/drain/core/progress_phases.py), and the
# subprocess machinery (a journal's writer is named from xtask/pids.py, issue #44).
NEVER = (
    "prometheus_client",
    "rich",
    "cloup",
    "xtask.drain.gates.promql",
    "xtask.drain.gates.error_ratio",
    "kubernetes.client.api.authentication_v1_api",
    "kubernetes.client.models.v1_self_subject_review",
    "xtask.drain.restore",
    "xtask.drain.core.waves",
    "xtask.drain.core.plandoc",
    "xtask.drain.edges.idle_waiter",
    "xtask.procs",
    "xtask.interrupts",
    "xtask.drain.core.progress_phases",
)


def imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` reported (one line per module: ``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line and not line.rstrip().endswith("imported package"):
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package":
                names.add(name)
    return names


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def test_a_single_drain_with_targets_imports_only_the_named_modules(env: DrainEnv):
    argv = env.argv("--provider", "p-one", *env.targets(), "--output", "json")
    assert argv[:2] == [sys.executable, "-m"]
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *argv[1:]], capture_output=True, text=True, env=env.env(), timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert parse_report(run.stdout)["convergence"]["state"] == "converged"
    names = imported(run.stderr)
    assert "kubernetes.client.rest" in names  # the measure works: the run really reached the API
    own = {n for n in names if n.split(".")[0] in ("xtask", "agn")}
    third = {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"xtask", "agn"}
    third = {n for n in third if not n.startswith("_")}
    assert sorted(own - OWN_MODULES) == [], "new modules on a single drain's path: add them on purpose"
    # and no more: scripts/bench/drain_imports.py times exactly this list as a single drain's own imports
    assert sorted(OWN_MODULES - own) == [], "modules no longer on a single drain's path: take them out of the list"
    assert sorted(third - THIRD_PARTY) == [], "new third-party packages on a single drain's path"
    assert not [n for n in names if n.split(".")[0] in NEVER or n in NEVER]
