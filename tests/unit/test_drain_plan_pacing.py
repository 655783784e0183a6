"""A plan fixes how the run goes, not only what it selects and writes: the soak, the wave gates
and their thresholds, --on-breach, --concurrency, --qps and the waits with their timeouts are
recorded when the plan is made (``spec.pacing``, ``arguments``, the review's output), applied
exactly by ``--plan``, refused beside it (exit 2 naming the flag), and a plan made before they
were recorded applies the defaults and says which. The CLI runs in-process with the drain
itself replaced: what is checked is the request it would run."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from jsonschema import Draft202012Validator
from test_reports import sample_drain_report

from reportschema import SCHEMAS
from xtask.__main__ import main
from xtask.cli.env.drain_view import plain_final
from xtask.drain.core.amounts import Amount
from xtask.drain.core.plandoc import PACING_FLAGS, PLANNED_FLAGS, LoadedPlan, pacing_doc, planned_arguments
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.edges.planfile import PlanInputs, build_plan, load_plan, plan_digest, plan_problems, write_plan
from xtask.drain.gates import gate_flags

T0 = 1_800_000_000.0
PLAN_SCHEMA = json.loads((SCHEMAS / "provider-drain-plan.schema.json").read_text())
TARGETS = {"network": "net", "consumers": ("c-a", "c-b")}


def waves(**changes) -> DrainRequest:
    return DrainRequest(selector=Selector(gateway="gw"), drain=True, wave_size=Amount(1), **TARGETS, **changes)


def plan_doc(request: DrainRequest) -> dict:
    selected = [
        {"metadata": {"name": "p-one", "uid": "u1", "resourceVersion": "1", "generation": 1}, "spec": {}},
    ]
    return build_plan(
        PlanInputs(
            created_at=T0,
            created_by="me@here",
            context="ctx",
            cluster="https://127.0.0.1:6443",
            namespace="ns",
            request=request,
            selected=selected,
            to_change=["p-one"],
            groups=[],
            budget=[],
            waves=[["p-one"]],
        )
    )


REVIEWED = waves(
    soak=2.0,
    on_breach="restore",
    concurrency=4,
    qps=5.0,
    timeout=60.0,
    wait_idle=True,
    idle_timeout=90.0,
    wait_sessions=30.0,
    gate_options={
        "max_error_ratio": 0.05,
        "min_requests": 3,
        "consumer_gateway_metrics": ("c-a=http://127.0.0.1:9/metrics",),
        "gate_promql": "up == 1",
        "prometheus": "http://127.0.0.1:9090",
    },
)


# -- recording ----------------------------------------------------------------------------------
def test_a_plan_records_every_pacing_value_in_its_spec_and_arguments():
    doc = plan_doc(REVIEWED)
    assert doc["spec"]["pacing"] == {
        "soak": 2.0,
        "onBreach": "restore",
        "concurrency": 4,
        "qps": 5.0,
        "timeout": 60.0,
        "waitIdle": True,
        "idleTimeout": 90.0,
        "waitSessions": 30.0,
        "sessionsTimeout": 600.0,  # not given: the default the run takes, recorded
        "gates": {
            "maxErrorRatio": 0.05,
            "consumerGatewayMetrics": ["c-a=http://127.0.0.1:9/metrics"],
            "minRequests": 3,
            "gatePromql": "up == 1",
            "prometheus": "http://127.0.0.1:9090",
        },
    }
    assert doc["metadata"]["arguments"][doc["metadata"]["arguments"].index("--wave-size") :] == [
        "--wave-size", "1", "--soak", "2", "--on-breach", "restore", "--concurrency", "4", "--qps", "5",
        "--timeout", "60", "--wait-idle", "--idle-timeout", "90", "--wait-sessions", "30",
        "--max-error-ratio", "0.05", "--consumer-gateway-metrics", "c-a=http://127.0.0.1:9/metrics",
        "--min-requests", "3", "--gate-promql", "up == 1", "--prometheus", "http://127.0.0.1:9090",
    ]  # fmt: skip
    assert list(Draft202012Validator(PLAN_SCHEMA).iter_errors(doc)) == [] and plan_problems(doc) == []


def test_defaults_are_recorded_as_the_values_the_run_takes_and_left_out_of_the_arguments():
    in_waves = pacing_doc(waves())
    assert (in_waves["soak"], in_waves["onBreach"], in_waves["concurrency"], in_waves["timeout"]) == (
        30.0,
        "hold",
        8,
        120.0,
    )
    assert in_waves["gates"]["maxErrorRatio"] is None  # not given: the gate's own default (0.01)
    assert planned_arguments(waves()) == ["--gateway", "gw", "--network", "net", "--consumer", "c-a", "--consumer", "c-b", "--wave-size", "1"]  # fmt: skip
    single = pacing_doc(DrainRequest(selector=Selector(provider="p"), drain=True))
    assert (single["soak"], single["onBreach"], single["idleTimeout"], single["sessionsTimeout"]) == (None,) * 4


def test_the_recorded_set_is_derived_from_the_gates_and_the_schema_names_the_rest():
    gate_names = {f.flag for f in PACING_FLAGS if f.gate}
    assert gate_names == {g.name for g in gate_flags()}  # every gate's flags, as the gates declare them
    pacing_schema = PLAN_SCHEMA["properties"]["spec"]["properties"]["pacing"]
    assert set(pacing_schema["properties"]) == {f.field for f in PACING_FLAGS if not f.gate} | {"gates"}
    assert set(pacing_schema["required"]) == set(pacing_schema["properties"])


def test_a_gate_value_its_flag_would_refuse_or_no_gate_takes_is_a_plan_problem():
    doc = plan_doc(REVIEWED)
    bad = copy.deepcopy(doc)
    bad["spec"]["pacing"]["gates"].update(maxErrorRatio=1.5, minRequests=0, latency=1, prometheus=["x"])
    assert plan_problems(bad) == [
        "spec.pacing.gates.maxErrorRatio (--max-error-ratio): 1.5 is not in the range 0<=x<=1.",
        "spec.pacing.gates.minRequests (--min-requests): 0 is not in the range x>=1.",
        "spec.pacing.gates.prometheus must be one value or null, got list ['x']",
        "spec.pacing.gates.latency: unknown field (no wave gate takes it)",
    ]
    bad["spec"]["pacing"]["gates"] = {"minRequests": True}
    assert plan_problems(bad) == [
        "spec.pacing.gates.minRequests must be a number or a string or a list or null, got True"
    ]


# -- the CLI: applying and refusing ----------------------------------------------------------------
@pytest.fixture
def requests(monkeypatch, tmp_path):
    """provider-drain with its run replaced: the requests it would run, in order."""
    import xtask.cli.env.provider_drain as command

    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    seen: list[DrainRequest] = []

    def run_drain(request, *, progress):
        seen.append(request)
        report = sample_drain_report()
        report.exit_code = report.exit_code.OK
        return report

    monkeypatch.setattr(command, "run_drain", run_drain)
    return seen


def written(tmp_path, doc: dict, name: str = "plan.yaml") -> str:
    path = tmp_path / name
    write_plan(path, doc)
    return str(path)


def apply(*argv: str) -> int:
    return main(["env", "provider-drain", "--context", "ctx", "--dry-run", *argv])


def test_plan_applies_exactly_the_recorded_pacing(requests, tmp_path, capsys):
    assert apply("--plan", written(tmp_path, plan_doc(REVIEWED))) == 0, capsys.readouterr().err
    (req,) = requests
    assert pacing_doc(req) == plan_doc(REVIEWED)["spec"]["pacing"]
    assert (req.soak_seconds, req.on_breach, req.concurrency, req.qps, req.timeout) == (2.0, "restore", 4, 5.0, 60.0)
    assert req.gate_options == REVIEWED.gate_options


SAMPLES = {  # a value the command line takes for each pacing flag
    "--soak": "9", "--on-breach": "hold", "--concurrency": "8", "--qps": "1", "--timeout": "120",
    "--wait-idle": None, "--idle-timeout": "60", "--wait-sessions": "5", "--sessions-timeout": "60",
    "--max-error-ratio": "0.01", "--consumer-gateway-metrics": "c-a=http://127.0.0.1:9/metrics",
    "--min-requests": "1", "--gate-promql": "up", "--prometheus": "http://127.0.0.1:9090",
}  # fmt: skip


@pytest.mark.parametrize("flag", [f.flag for f in PACING_FLAGS])
def test_each_pacing_flag_beside_plan_is_a_usage_error_naming_it(requests, tmp_path, capsys, flag):
    """Even at its default value (--concurrency 8, --timeout 120): the plan's value is the one
    reviewed, and the applier cannot swap it."""
    argv = [flag] if SAMPLES[flag] is None else [flag, SAMPLES[flag]]
    assert apply("--plan", written(tmp_path, plan_doc(REVIEWED)), *argv) == 2
    err = capsys.readouterr().err
    assert f"--plan applies the plan's selection, operation and pacing: do not give {flag} with it" in err
    assert requests == []


def test_every_pacing_flag_has_a_sample_and_is_planned():
    assert set(SAMPLES) == {f.flag for f in PACING_FLAGS}
    assert all(f in PLANNED_FLAGS for f in PACING_FLAGS)


def test_the_gates_older_flag_name_is_refused_too(requests, tmp_path, capsys):
    path = written(tmp_path, plan_doc(REVIEWED))
    assert apply("--plan", path, "--gateway-metrics", "c-a=http://127.0.0.1:9/metrics") == 2
    assert "do not give --consumer-gateway-metrics with it" in capsys.readouterr().err


# -- plans made before the pacing was recorded --------------------------------------------------------
def old_plan(request: DrainRequest) -> dict:
    doc = plan_doc(request)
    del doc["spec"]["pacing"]
    doc["metadata"]["arguments"] = [a for a in doc["metadata"]["arguments"] if a not in ("--soak", "2")]
    doc["metadata"]["digest"] = plan_digest(doc)
    return doc


def test_an_older_plan_is_read_applies_the_defaults_and_names_what_it_does_not_record(requests, tmp_path, capsys):
    path = written(tmp_path, old_plan(waves(soak=2.0)))
    plan = load_plan(tmp_path / "plan.yaml")
    assert plan.not_recorded() == [f.flag for f in PACING_FLAGS]
    assert LoadedPlan(plan.path, plan_doc(REVIEWED)).not_recorded() == []
    assert apply("--plan", path) == 0, capsys.readouterr().err
    (req,) = requests
    assert (req.soak_seconds, req.on_breach, req.concurrency, req.timeout, req.gate_options) == (
        30.0,
        None,
        8,
        120.0,
        {},
    )
    assert pacing_doc(req)["soak"] == 30.0  # what the review of the run shows it applies


def test_a_plan_of_an_older_version_of_the_gates_names_only_the_gate_flag_it_lacks():
    doc = plan_doc(waves())
    del doc["spec"]["pacing"]["gates"]["minRequests"]
    assert LoadedPlan(None, doc).not_recorded() == ["--min-requests"]  # type: ignore[arg-type]


# -- what a review shows ------------------------------------------------------------------------------
def test_the_human_output_of_a_written_plan_lists_its_pacing(tmp_path):
    pacing = pacing_doc(waves(soak=2.0, gate_options={"max_error_ratio": 0.05}))
    report = sample_drain_report(
        plan_file={"path": "p.yaml", "digest": "sha256:x", "action": "written", "pacing": pacing}
    )
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        plain_final(report, stream)
    assert (
        "plan pacing: --soak 2 --on-breach hold --concurrency 8 --timeout 120 --max-error-ratio 0.05"
        in out.read_text().splitlines()
    )
    applied = dataclasses.replace(
        report, plan_file={**report.plan_file, "action": "applied", "notRecorded": ["--soak", "--qps"]}
    )
    with out.open("w") as stream:
        plain_final(applied, stream)
    assert "(not recorded by the plan, defaults: --soak, --qps)" in out.read_text()


def test_the_reports_schema_takes_the_pacing_and_what_a_plan_did_not_record():
    """``-o json`` / ``-o yaml`` of a plan written or applied: planFile carries the pacing (and,
    applied, the flags the plan does not record), as the report's schema describes."""
    from reportschema import check_report

    plan_file = {"path": "p.yaml", "digest": "sha256:" + "0" * 64, "action": "applied"}
    plan_file |= {"pacing": pacing_doc(REVIEWED), "notRecorded": ["--qps"]}
    doc = check_report(
        json.loads(json.dumps(sample_drain_report(plan_file=plan_file).to_dict())), "ProviderDrainReport"
    )
    assert doc["planFile"]["pacing"]["gates"]["maxErrorRatio"] == 0.05 and doc["planFile"]["notRecorded"] == ["--qps"]
