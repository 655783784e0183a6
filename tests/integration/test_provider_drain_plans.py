"""Reviewable plans (``--plan-out`` / ``--plan``) and the fleet budget (``--max-unavailable``)
against the real API server, real operator and real consumer gateways, through the real CLI."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import yaml

from agn.kube import LEASES, PROVIDERS
from agn.objects import parse_time
from agnprocs import Traffic, http_json, wait_for
from drainenv import CONSUMER_NAMES, LAYOUT, DrainEnv
from reportschema import check_report, parse_report
from xtask.drain.core.holds import OPERATION
from xtask.drain.core.plandoc import PACING_FLAGS
from xtask.drain.edges.journal import read_journal
from xtask.drain.edges.planfile import plan_digest

pytestmark = pytest.mark.integration


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def written(env: DrainEnv) -> dict[str, tuple]:
    """Every provider's generation and drain-operation annotation: any drain write changes one."""
    out = {}
    for p in env.kube.list(PROVIDERS, env.ns)[0]:
        meta = p["metadata"]
        out[meta["name"]] = (meta["generation"], (meta.get("annotations") or {}).get(OPERATION))
    return out


def make_plan(env: DrainEnv, path: Path, *args: str) -> dict:
    code, report = env.run_json(*args, "--plan-out", str(path))
    assert code == 0, report
    assert report["planFile"]["action"] == "written" and report["planFile"]["path"] == str(path)
    return report


def test_plan_out_writes_a_plan_and_nothing_else_then_plan_applies_exactly_it(env: DrainEnv):
    before = written(env)
    path = env.tmp / "plan.yaml"
    # --soak 0: paced by convergence, no gate to feed traffic to (the plan fixes it).
    report = make_plan(
        env, path, "--gateway", "gw-a", "--reason", "kernel", *env.targets(), "--wave-size", "1", "--soak", "0"
    )
    assert written(env) == before and env.journal_paths() == []  # a plan changes nothing, keeps no journal
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    plan = check_report(yaml.safe_load(path.read_text()), "ProviderDrainPlan")  # the plan's JSON Schema
    assert plan["metadata"]["digest"] == report["planFile"]["digest"]
    assert plan["metadata"]["namespace"] == env.ns and plan["metadata"]["context"] == env.cp.context
    assert plan["metadata"]["arguments"] == [
        "--gateway", "gw-a", "--reason", "kernel", "--network", "net",
        "--consumer", "c-a", "--consumer", "c-b", "--wave-size", "1", "--soak", "0",
    ]  # fmt: skip
    spec = plan["spec"]
    assert [p["name"] for p in spec["selection"]] == ["p-one", "p-two"]
    for entry in spec["selection"]:
        meta = env.provider(entry["name"])["metadata"]
        assert (entry["resourceVersion"], entry["uid"], entry["drain"], entry["holders"]) == (
            meta["resourceVersion"],
            meta["uid"],
            None,
            [],
        )
    assert spec["operation"] == {"request": "drain", "reason": "kernel", "force": False}
    assert spec["targets"] == {"network": "net", "consumers": list(CONSUMER_NAMES)}
    # Each consumer's chat and embed groups have two admitted providers; gw-a takes one of each.
    assert spec["groups"] == [
        {"consumer": c, "group": g, "admittedBefore": 2, "admittedAfter": 1}
        for c in CONSUMER_NAMES
        for g in ("chat", "embed")
    ]
    assert spec["waves"] == {"size": "1", "waves": [["p-one"], ["p-two"]]}

    # The plan's waves, one after another, at the plan's pacing.
    code, applied = env.run_json("--plan", str(path))
    assert code == 0, applied
    assert [(w["providers"], w["state"]) for w in applied["waves"]] == [(["p-one"], "held"), (["p-two"], "held")]
    assert applied["planFile"] == {
        "path": str(path),
        "digest": plan["metadata"]["digest"],
        "action": "applied",
        "pacing": spec["pacing"],
        "notRecorded": [],
    }
    assert applied["selection"] == ["p-one", "p-two"] and applied["convergence"]["state"] == "converged"
    for c in CONSUMER_NAMES:
        states = env.states(c)
        assert (states["p-one"], states["p-two"], states["p-three"]) == ("existing_only", "existing_only", "admitted")
    assert env.provider("p-one")["metadata"]["annotations"]["agn.dev/drain-reason"] == "kernel"
    (journal,) = env.journal_paths()
    assert read_journal(journal).plan_digest == plan["metadata"]["digest"]


def test_a_plan_applies_the_soak_and_gate_threshold_it_was_reviewed_with_and_refuses_another(env: DrainEnv):
    path = env.tmp / "paced.yaml"
    made = ("--gateway", "gw-a", *env.targets(), "--wave-size", "1", "--soak", "2", "--max-error-ratio", "0.05")
    report = make_plan(env, path, *made)
    plan = yaml.safe_load(path.read_text())
    pacing = plan["spec"]["pacing"]
    assert (pacing["soak"], pacing["onBreach"], pacing["gates"]["maxErrorRatio"]) == (2.0, "hold", 0.05)
    assert plan["metadata"]["arguments"][-6:] == ["--wave-size", "1", "--soak", "2", "--max-error-ratio", "0.05"]
    assert report["planFile"]["pacing"] == pacing  # the review (-o json) shows what the plan fixes
    # ... and so does the human output of --plan-out, on stdout.
    proc = env.run(*made, "--plan-out", str(env.tmp / "again.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "plan pacing: --soak 2 --on-breach hold --concurrency 8 --timeout 120 --max-error-ratio 0.05" in (
        proc.stdout.splitlines()
    )

    before = written(env)
    proc = env.run("--plan", str(path), "--soak", "9")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "do not give --soak with it" in proc.stderr
    assert written(env) == before and env.journal_paths() == []

    with Traffic([env.gateways[c] for c in CONSUMER_NAMES]) as traffic:
        code, applied = env.run_json("--plan", str(path))
    assert code == 0, applied
    assert applied["planFile"]["pacing"] == pacing and applied["planFile"]["notRecorded"] == []
    assert [w["providers"] for w in applied["waves"]] == [["p-one"], ["p-two"]]
    for wave in applied["waves"]:
        [gate] = wave["gates"]
        assert (gate["gate"], gate["threshold"], gate["held"]) == ("error-ratio", "<= 0.05", True), gate
        assert 2 <= wave["soakSeconds"] < 30, wave  # the plan's soak, not the default 30 s
    assert applied["summary"].endswith("each soaked 2s with every gate held"), applied["summary"]
    assert 200 in traffic.codes
    soaked = [r for r in journal_records(env) if r["type"] == "wave" and r["state"] == "soaked"]
    assert [r["gates"][0]["threshold"] for r in soaked] == ["<= 0.05", "<= 0.05"]


def journal_records(env: DrainEnv) -> list[dict]:
    (journal,) = env.journal_paths()
    return [json.loads(line) for line in journal.read_text().splitlines()]


def test_a_plan_made_before_plans_recorded_the_pacing_applies_the_defaults_and_says_so(env: DrainEnv):
    path = env.tmp / "old.yaml"
    make_plan(env, path, "--provider", "p-one")
    doc = yaml.safe_load(path.read_text())
    del doc["spec"]["pacing"]  # as plans were written before they recorded it
    doc["metadata"]["digest"] = plan_digest(doc)
    path.write_text(yaml.safe_dump(doc))
    proc = env.run("--plan", str(path), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    missing = [f.flag for f in PACING_FLAGS]
    assert f"plan {path} does not record {', '.join(missing)} (made before plans recorded them)" in proc.stderr
    report = parse_report(proc.stdout)
    assert report["planFile"]["notRecorded"] == missing
    assert (report["planFile"]["pacing"]["concurrency"], report["planFile"]["pacing"]["timeout"]) == (8, 120.0)
    assert env.drain_value("p-one") is True


def test_a_plan_made_stale_by_one_provider_change_is_refused_naming_it(env: DrainEnv):
    path = env.tmp / "plan.json"
    make_plan(env, path, "--gateway", "gw-a")
    old_rv = env.provider("p-two")["metadata"]["resourceVersion"]
    env.kube.merge_patch(PROVIDERS, env.ns, "p-two", {"metadata": {"labels": {"touched": "yes"}}})
    before = written(env)
    code, report = env.run_json("--plan", str(path))
    assert code == 3, report
    assert report["refused"] == [
        f"provider p-two changed since the plan was made (its labels: resourceVersion {old_rv} -> "
        f"{env.provider('p-two')['metadata']['resourceVersion']})"
    ]
    assert written(env) == before and env.journal_paths() == []


def test_an_undrain_plan_applies_after_the_operator_rewrote_every_providers_status(env: DrainEnv):
    """The operator publishes each drained provider's load in its status, rewritten when the load
    changes: every provider's resourceVersion moves after the plan (their waiting counts change),
    the spec and the holds do not, and the plan applies."""
    assert env.run("--gateway", "gw-a").returncode == 0
    path = env.tmp / "undrain.yaml"
    make_plan(env, path, "--gateway", "gw-a", "--undrain")
    planned = {e["name"]: e for e in yaml.safe_load(path.read_text())["spec"]["selection"]}
    for number, name in enumerate(sorted(planned), start=1):
        http_json(f"{env.urls[name]}/admin/state", method="POST", body={"waiting": number})
    wait_for(
        lambda: all(env.provider(n)["metadata"]["resourceVersion"] != e["resourceVersion"] for n, e in planned.items()),
        timeout=60,
        what="the operator to write every drained provider's status after the plan was made",
    )
    assert all(env.provider(n)["metadata"]["generation"] == e["generation"] for n, e in planned.items())
    code, report = env.run_json("--plan", str(path))
    assert code == 0, report
    assert report["refused"] == [] and sorted(report["selection"]) == sorted(planned)
    assert all(not env.drain_value(n) for n in planned)


def test_a_provider_that_joined_or_left_the_selection_is_refused_naming_it(env: DrainEnv):
    path = env.tmp / "plan.yaml"
    make_plan(env, path, "--gateway", "gw-a")
    env.add_provider("p-five", "gw-a", "chat", 3, "http://127.0.0.1:9/p-five")
    env.kube.merge_patch(PROVIDERS, env.ns, "p-two", {"spec": {"providerGateway": "gw-b"}})
    before = written(env)
    proc = env.run("--plan", str(path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "provider p-five joined the selection since the plan was made" in proc.stdout
    assert "provider p-two left the selection since the plan was made" in proc.stdout
    assert written(env) == before and env.journal_paths() == []


def test_a_plan_older_than_max_plan_age_is_refused(env: DrainEnv):
    path = env.tmp / "plan.yaml"
    make_plan(env, path, "--provider", "p-one")
    created = parse_time(yaml.safe_load(path.read_text())["metadata"]["createdAt"])
    assert created is not None
    # The plan ages on the clock: wait until it is older than the bound given below.
    wait_for(lambda: time.time() - created > 1.5, timeout=10, what="the plan to be older than 1s")
    before = written(env)
    code, report = env.run_json("--plan", str(path), "--max-plan-age", "1s")
    assert code == 3, report
    assert len(report["refused"]) == 1 and "older than --max-plan-age 1.0s" in report["refused"][0]
    assert written(env) == before and env.journal_paths() == []
    # The same plan within the default age (1h) still applies.
    code, report = env.run_json("--plan", str(path))
    assert code == 0, report
    assert env.drain_value("p-one") is True


def test_a_plan_refuses_selection_flags_and_an_edited_plan(env: DrainEnv):
    path = env.tmp / "plan.yaml"
    make_plan(env, path, "--provider", "p-one")
    proc = env.run("--plan", str(path), "--gateway", "gw-b")
    assert proc.returncode == 2 and "do not give --gateway with it" in proc.stderr
    edited = env.tmp / "edited.yaml"
    edited.write_text(path.read_text().replace("request: drain", "request: undrain"))
    proc = env.run("--plan", str(edited))
    assert proc.returncode == 3 and "its digest does not match its content" in proc.stderr, proc.stderr
    assert env.drain_value("p-one") is None


def test_budget_refuses_naming_the_group_and_count_and_counts_hard_failures(env: DrainEnv):
    assert env.run("--provider", "p-three").returncode == 0  # drained by someone: counts
    before = written(env)
    code, report = env.run_json("--provider", "p-one", "--max-unavailable", "1")
    assert code == 3, report
    assert report["refused"] == [
        "budget: network net, selection group 'chat': 2 of 2 provider(s) would be unavailable (1 drained, "
        "0 out for a hard failure, 1 drained by this run: p-one), over --max-unavailable 1 (1)"
    ]
    assert report["budget"]["groups"][0]["drained"] == ["p-three"]
    assert written(env) == before
    # A plan is refused alike, and then no plan file is written.
    code, report = env.run_json("--provider", "p-one", "--max-unavailable", "1", "--plan-out", str(env.tmp / "no.yaml"))
    assert code == 3 and report["refused"][0].startswith("budget: network net, selection group 'chat'"), report
    assert not (env.tmp / "no.yaml").exists() and report["planFile"] is None

    # A hard failure counts too: p-four unhealthy, as the operator observed it.
    env.set_health("p-four", False)
    wait_for(
        lambda: (env.provider("p-four").get("status") or {}).get("probe", {}).get("healthy") is False,
        what="the operator to observe p-four unhealthy",
    )
    code, report = env.run_json("--provider", "p-two", "--max-unavailable", "50%", "--dry-run")
    assert code == 3, report
    assert (
        "selection group 'embed': 2 of 2 provider(s) would be unavailable (0 drained, 1 out for a hard failure"
        in (report["refused"][0])
    )
    assert written(env) == before

    # Within the budget: reported (here in a plan), and the drain goes ahead.
    code, report = env.run_json("--provider", "p-one", "--max-unavailable", "100%", "--dry-run")
    assert code == 0, report
    (chat,) = report["budget"]["groups"]
    assert (chat["group"], chat["unavailableNow"], chat["unavailableAfter"], chat["budget"]) == ("chat", 1, 2, 2)
    make_plan(env, env.tmp / "plan.yaml", "--provider", "p-one", "--max-unavailable", "2")
    plan = yaml.safe_load((env.tmp / "plan.yaml").read_text())
    assert plan["spec"]["budget"]["maxUnavailable"] == "2"
    assert plan["spec"]["budget"]["groups"][0]["byThisRun"] == ["p-one"]
    code, report = env.run_json("--plan", str(env.tmp / "plan.yaml"))
    assert code == 0, report
    assert report["budget"]["groups"][0]["unavailableAfter"] == 2
    assert sorted(n for n in LAYOUT if env.drain_value(n)) == ["p-one", "p-three"]


def test_a_stale_plan_is_refused_by_the_plan_guard_under_the_drain_lock(env: DrainEnv):
    """The staleness check is a drain guard: on the look under the drain lock (a real drain in one
    wave), named in the report's guards, the lock given back, nothing written, no journal."""
    path = env.tmp / "plan.yaml"
    make_plan(env, path, "--provider", "p-one")
    env.kube.merge_patch(PROVIDERS, env.ns, "p-one", {"metadata": {"labels": {"touched": "yes"}}})
    before = written(env)
    proc = env.run("--plan", str(path), "--output", "json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    report = parse_report(proc.stdout)
    assert len(report["refused"]) == 1 and report["refused"][0].startswith("provider p-one changed since the plan")
    assert f"the plan {path} no longer describes the cluster: provider p-one changed" in proc.stderr
    plan_guard = {g["guard"]: g for g in report["guards"]}["plan"]
    assert plan_guard["refused"] == report["refused"] and plan_guard["checked"] == "before writing"
    assert report["lock"]["acquisitions"], report["lock"]  # looked under the lock ...
    assert report["dryRunOutcomes"] == []  # ... before the dry run
    leases = [lease["metadata"]["name"] for lease in env.kube.list(LEASES, env.ns)[0]]
    assert [n for n in leases if n.startswith("agn-drain")] == []  # and gave it back
    assert written(env) == before and env.journal_paths() == []
