"""provider-drain against the real API server, real operator and real consumer gateways,
driven through the real CLI in a subprocess."""

from __future__ import annotations

import pytest
import yaml

from agnprocs import wait_for
from drainenv import CONSUMER_NAMES, LAYOUT, DrainEnv
from reportschema import check_report
from xtask.drain.core.holds import OPERATION, REASON

pytestmark = pytest.mark.integration


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def generations(env: DrainEnv) -> dict[str, tuple]:
    out = {}
    for name in LAYOUT:
        meta = env.provider(name)["metadata"]
        out[name] = (meta["generation"], (meta.get("annotations") or {}).get(OPERATION))
    return out


def test_provider_drain_and_undrain_converge_on_every_consumer(env: DrainEnv):
    before = {c: env.overlay(c) for c in CONSUMER_NAMES}
    code, report = env.run_json("--provider", "p-one", "--reason", "kernel upgrade", *env.targets())
    assert code == 0, report
    assert report["selection"] == ["p-one"]
    assert report["convergence"]["state"] == "converged"
    assert report["convergence"]["observations"] >= 2
    for c in CONSUMER_NAMES:
        overlay = env.overlay(c)
        cand = next(x for x in overlay["candidates"] if x["provider"] == "p-one")
        old = next(x for x in before[c]["candidates"] if x["provider"] == "p-one")
        assert cand["admission_state"] == "existing_only"
        assert (cand["id"], cand["selectionGroup"], cand["rank"]) == (old["id"], old["selectionGroup"], old["rank"])
        # Completion means serving the revision that carries the change, not merely stored.
        assert env.revisions(c) == (overlay["revision"], overlay["revision"])
        assert overlay["revision"] > before[c]["revision"]
    annotations = env.provider("p-one")["metadata"]["annotations"]
    assert annotations[REASON] == "kernel upgrade"
    assert "agn.dev/drain-by" in annotations and "agn.dev/drain-at" in annotations

    code, report = env.run_json("--provider", "p-one", "--undrain", *env.targets())
    assert code == 0, report
    assert all(env.states(c)["p-one"] == "admitted" for c in CONSUMER_NAMES)
    assert REASON not in (env.provider("p-one")["metadata"].get("annotations") or {})
    assert report["journal"] and env.journals()[-1]["state"] == "complete"


def test_gateway_drain_selects_exactly_the_gateway_sorted(env: DrainEnv):
    proc = env.run("--gateway", "gw-a", *env.targets())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].endswith("p-one, p-two")
    for c in CONSUMER_NAMES:
        states = env.states(c)
        assert (states["p-one"], states["p-two"]) == ("existing_only", "existing_only")
        assert (states["p-three"], states["p-four"]) == ("admitted", "admitted")
    assert env.drain_value("p-three") is None  # untouched: not even written as false


def test_patch_only_reports_stored_and_rerun_writes_nothing(env: DrainEnv):
    proc = env.run("--gateway", "gw-b")
    assert proc.returncode == 0, proc.stderr
    assert "stored: spec.trafficPolicy.drain=true on 2 provider(s)" in proc.stdout
    before = generations(env)
    rvs = {n: env.provider(n)["metadata"]["resourceVersion"] for n in ("p-three", "p-four")}
    code, report = env.run_json("--gateway", "gw-b")
    assert code == 0
    assert {o["outcome"] for o in report["outcomes"]} == {"unchanged"}
    assert report["journal"] is None  # nothing to write, nothing to journal
    assert generations(env) == before
    # No spec write happened; only the operator's status writes may have moved resourceVersion.
    for name, _rv in rvs.items():
        assert env.provider(name)["metadata"]["generation"] == before[name][0]


def test_progress_goes_to_stderr_and_the_result_to_stdout_when_stdout_is_a_pipe(env: DrainEnv):
    proc = env.run("--gateway", "gw-b")  # stdout and stderr: two pipes
    assert proc.returncode == 0, proc.stdout + proc.stderr
    progress = proc.stderr.splitlines()
    assert "  plan p-three: drain false -> true (will change)" in progress
    assert any(line.startswith("journal: ") for line in progress)
    result = proc.stdout.splitlines()
    assert result[0] == f"selection (providerGateway gw-b, namespace {env.ns}): p-four, p-three"
    assert sorted(result[1:3]) == ["  write p-four: changed", "  write p-three: changed"]
    assert result[-1].startswith("ok: stored: spec.trafficPolicy.drain=true on 2 provider(s)")
    assert not any("plan p-" in line or line.startswith("journal: ") for line in result)


def test_yaml_and_name_outputs_of_a_real_run(env: DrainEnv):
    dry = env.run("--gateway", "gw-a", "--dry-run", "-o", "yaml")
    assert dry.returncode == 0, dry.stderr
    report = check_report(yaml.safe_load(dry.stdout), "ProviderDrainReport")
    assert report["dryRun"] is True and report["selection"] == ["p-one", "p-two"]
    assert "plan p-one" in dry.stderr  # progress stays on stderr
    named = env.run("--gateway", "gw-a", "-o", "name")
    assert named.returncode == 0, named.stderr
    assert named.stdout.splitlines() == ["inferenceprovider.agn.dev/p-one", "inferenceprovider.agn.dev/p-two"]
    assert env.drain_value("p-one") is True and "write p-one: changed" in named.stderr


def test_dry_run_prints_plan_and_writes_nothing(env: DrainEnv):
    env.run("--provider", "p-two")  # so the plan has one already-drained provider
    before = generations(env)
    proc = env.run("--gateway", "gw-a", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "plan p-one: drain false -> true (will change)" in proc.stdout
    assert "plan p-two: drain true -> true (already in requested state)" in proc.stdout
    assert "nothing written" in proc.stdout
    assert generations(env) == before
    assert env.journals() and len(env.journals()) == 1  # only the earlier real run journaled


def test_usage_and_refusals_change_nothing(env: DrainEnv):
    before = generations(env)
    assert env.run("--provider", "p-one", "--gateway", "gw-a").returncode == 2
    assert env.run().returncode == 2
    assert env.run("--provider", "p-one", "--network", "net").returncode == 2
    missing = env.run("--provider", "nope")
    assert missing.returncode == 3 and "'nope' not found" in missing.stderr + missing.stdout
    empty = env.run("--gateway", "gw-zzz")
    assert empty.returncode == 3 and "gw-a, gw-b" in empty.stderr + empty.stdout
    bad_target = env.run("--provider", "p-one", "--network", "net", "--consumer", "c-a", "--consumer", "c-missing")
    assert bad_target.returncode == 3 and "consumer 'c-missing' not found" in bad_target.stdout
    assert generations(env) == before


def test_capacity_guard_refuses_emptying_a_group_unless_forced(env: DrainEnv):
    assert env.run("--provider", "p-three", *env.targets()).returncode == 0
    before = generations(env)
    proc = env.run("--gateway", "gw-a", *env.targets())
    assert proc.returncode == 3, proc.stdout
    assert "capacity guard: consumer c-a: selection group 'chat' would have no admitted provider" in proc.stdout
    assert generations(env) == before
    forced = env.run("--gateway", "gw-a", "--force", *env.targets())
    assert forced.returncode == 0, forced.stdout
    assert env.states("c-a")["p-one"] == "existing_only"


def test_capacity_guard_counts_a_drain_the_overlays_do_not_show_yet(env: DrainEnv):
    """The operator is stopped, so the overlays lag: p-one's drain (another run's, finished) is
    not in them. A drain of p-three, the other chat provider, must still be refused: under the
    drain lock the guard counts p-one as leaving, not as the overlay still shows it."""
    env.agn.stop("operator")
    assert env.run("--provider", "p-one").returncode == 0  # no targets: written, no wait
    assert env.states("c-a")["p-one"] == "admitted"  # the overlay does not show it
    before = generations(env)
    proc = env.run("--provider", "p-three", *env.targets())
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "capacity guard: consumer c-a: selection group 'chat' would have no admitted provider" in proc.stdout
    assert generations(env) == before


def test_consumer_that_stops_serving_times_out_naming_it(env: DrainEnv):
    env.agn.stop("gateway-c-b")
    code, report = env.run_json("--provider", "p-one", "--timeout", "4", *env.targets())
    assert code == 6, report
    assert report["convergence"]["state"] == "timeout"
    lagging = " ".join(report["convergence"]["lagging"])
    assert "consumer c-b" in lagging and "c-a" not in lagging
    assert env.drain_value("p-one") is True  # stored; only not confirmed serving


def test_undrain_of_unhealthy_provider_is_not_eligible_until_healthy(env: DrainEnv):
    assert env.run("--provider", "p-one", *env.targets()).returncode == 0
    env.set_health("p-one", False)
    wait_for(lambda: all("p-one" not in env.states(c) for c in CONSUMER_NAMES), what="p-one excluded as unavailable")
    code, report = env.run_json("--provider", "p-one", "--undrain", *env.targets())
    assert code == 7, report
    assert report["convergence"]["state"] == "not-eligible"
    assert any("not eligible until healthy (unavailable)" in m for m in report["convergence"]["notEligible"])
    assert env.drain_value("p-one") is False  # the undrain is stored
    env.set_health("p-one", True)
    # Eligibility follows what the operator has observed: wait for its probe to see recovery.
    wait_for(
        lambda: (env.provider("p-one").get("status") or {}).get("probe", {}).get("healthy") is True,
        what="the operator to observe p-one healthy again",
    )
    code, report = env.run_json("--provider", "p-one", "--undrain", *env.targets())
    assert code == 0, report
    assert all(env.states(c)["p-one"] == "admitted" for c in CONSUMER_NAMES)


def test_drain_of_unhealthy_provider_is_reported_excluded(env: DrainEnv):
    env.set_health("p-two", False)
    wait_for(lambda: all("p-two" not in env.states(c) for c in CONSUMER_NAMES), what="p-two excluded")
    code, report = env.run_json("--provider", "p-two", *env.targets())
    assert code == 0, report
    details = {p["detail"] for p in report["convergence"]["providers"]}
    assert details == {"excluded: unavailable"}
