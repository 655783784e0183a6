"""provider-drain when things go wrong, for real: the API server rejecting writes mid-fan-out
(a ValidatingAdmissionPolicy that lets server-side dry runs through but denies real writes),
a concurrent writer, real signals to a real process, and kill -9 followed by journal restore."""

from __future__ import annotations

import signal
import uuid

import pytest

from agn.kube import PROVIDERS, Invalid
from agnprocs import wait_for
from drainenv import DrainEnv
from kubetest import denying_updates
from xtask.drain.core.holds import REASON

pytestmark = pytest.mark.integration

# Eight providers in one gateway, so a paced fan-out (--qps) leaves time to act mid-way.
BIG = {f"p{i}": ("gw-big", "chat" if i % 2 else "embed", i) for i in range(8)}
BIG["q-other"] = ("gw-other", "chat", 9)
BIG["q-other2"] = ("gw-other", "embed", 9)


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=BIG)


@pytest.fixture
def reject_real_writes(kube, namespace):
    """Deny non-dry-run updates of providers labelled ``reject-writes=<token>`` in this namespace."""
    yield from _admission_policy(kube, namespace, expression="request.dryRun == true")


@pytest.fixture
def reject_all_writes(kube, namespace):
    """Deny every update (dry run included) of providers labelled ``reject-writes=<token>``."""
    yield from _admission_policy(kube, namespace, expression="false")


def _admission_policy(kube, namespace, *, expression: str):
    token = uuid.uuid4().hex[:8]
    with denying_updates(
        kube,
        namespace,
        "inferenceproviders",
        expression=expression,
        message="writes to this provider are frozen (test admission policy)",
        object_selector={"matchLabels": {"reject-writes": token}},
    ):
        yield token


def label(env: DrainEnv, provider: str, key: str, value: str) -> None:
    env.kube.merge_patch(PROVIDERS, env.ns, provider, {"metadata": {"labels": {key: value}}})


def wait_policy_active(env: DrainEnv, provider: str, *, dry_run: bool = False) -> None:
    def rejected() -> bool:
        try:
            env.kube.merge_patch(
                PROVIDERS, env.ns, provider, {"metadata": {"annotations": {"probe": uuid.uuid4().hex}}}, dry_run=dry_run
            )
        except Invalid:
            return True
        return False

    wait_for(rejected, timeout=30, interval=0.2, what="admission policy to take effect")


def test_server_side_dry_run_rejection_refuses_before_any_write(env: DrainEnv, reject_all_writes):
    label(env, "p3", "reject-writes", reject_all_writes)
    wait_policy_active(env, "p3", dry_run=True)
    generations = {n: env.provider(n)["metadata"]["generation"] for n in BIG}
    for extra in ((), ("--dry-run",)):
        code, report = env.run_json("--gateway", "gw-big", *extra)
        assert code == 3, report
        rejected = [o for o in report["dryRunOutcomes"] if o["outcome"] == "dry-run-rejected"]
        assert [o["provider"] for o in rejected] == ["p3"] and "frozen" in rejected[0]["error"]
        assert report["outcomes"] == [] and report["journal"] is None
    assert {n: env.provider(n)["metadata"]["generation"] for n in BIG} == generations


def test_a_single_write_refused_by_admission_is_a_refusal_that_changed_nothing(env: DrainEnv, reject_all_writes):
    # One write sends no dry run (one PATCH is all-or-nothing by itself): the API server's refusal
    # of the write itself is reported for the provider, exits 3 and leaves everything as it was.
    label(env, "p3", "reject-writes", reject_all_writes)
    wait_policy_active(env, "p3")
    before = env.provider("p3")["metadata"]["resourceVersion"]
    code, report = env.run_json("--provider", "p3")
    assert code == 3, report
    assert report["dryRunOutcomes"] == []
    assert [r.split(":")[0] for r in report["refused"]] == ["p3"] and "frozen" in report["refused"][0]
    (outcome,) = report["outcomes"]
    assert (outcome["provider"], outcome["outcome"]) == ("p3", "failed") and "frozen" in outcome["error"]
    assert report["restorations"] == [] and "the API server refused 1 write(s)" in report["summary"]
    assert env.provider("p3")["metadata"]["resourceVersion"] == before and env.drain_value("p3") is None
    assert env.journals()[-1]["state"] == "restored"  # opened before the write, as always; nothing to restore


def test_real_rejection_mid_fan_out_restores_the_others(env: DrainEnv, reject_real_writes):
    label(env, "p5", "reject-writes", reject_real_writes)
    wait_policy_active(env, "p5")
    code, report = env.run_json("--gateway", "gw-big", "--concurrency", "2")
    # The API server refused the write on its merits (its policy changed after the dry run) and
    # everything else was put back: a refusal (3) naming the provider and the policy's message.
    assert code == 3, report
    assert [r.split(":")[0] for r in report["refused"]] == ["p5"] and "frozen" in report["refused"][0]
    outcomes = {o["provider"]: o for o in report["outcomes"]}
    assert outcomes["p5"]["outcome"] == "failed"
    assert "frozen" in outcomes["p5"]["error"]
    changed = sorted(n for n, o in outcomes.items() if o["outcome"] == "changed")
    assert changed, "the fan-out should have written others before or after the rejection"
    restored = {r["provider"]: r["outcome"] for r in report["restorations"]}
    assert restored == {n: "restored" for n in changed}
    for name in BIG:
        meta = env.provider(name)
        assert env.drain_value(name) is None, name  # back to omitted, exactly as before
        assert REASON not in (meta["metadata"].get("annotations") or {})
    assert env.journals()[-1]["state"] == "restored"


def test_concurrent_writer_is_never_clobbered(env: DrainEnv, reject_real_writes):
    # p7 will be rejected, forcing restoration; meanwhile another writer changes p0 (already
    # written by us) and p6 (not yet written). Neither change may be lost.
    label(env, "p7", "reject-writes", reject_real_writes)
    wait_policy_active(env, "p7")
    run = env.spawn("--gateway", "gw-big", "--concurrency", "1", "--qps", "2")
    wait_for(lambda: any(j["providers"]["p0"]["written"] for j in env.journals()), timeout=30, what="p0 written")
    # The other writer releases every hold as it clears the drain (the admission policy refuses
    # clearing it while a hold remains; the admin is allowed release-holds).
    held = [k for k in env.provider("p0")["metadata"].get("annotations") or {} if ".drain.agn.dev/" in k]
    other = {"metadata": {"annotations": dict.fromkeys(held)}, "spec": {"rank": 42, "trafficPolicy": {"drain": False}}}
    env.kube.merge_patch(PROVIDERS, env.ns, "p0", other)
    env.kube.merge_patch(PROVIDERS, env.ns, "p6", {"spec": {"rank": 43}})
    code = run.wait(timeout=60)
    assert code == 5, run.output  # restoration incomplete: p0 was changed by another writer
    assert "p0: changed-by-another-writer" in run.output.replace("restore p0", "p0")
    p0, p6 = env.provider("p0"), env.provider("p6")
    assert p0["spec"]["rank"] == 42 and env.drain_value("p0") is False  # the other writer's values stand
    assert p6["spec"]["rank"] == 43  # our conditional patch re-read instead of overwriting
    assert env.drain_value("p6") is None  # and restoration put our drain back
    assert env.journals()[-1]["state"] == "needs-inspection"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_fan_out_restores_and_exits_interrupted(env: DrainEnv, sig):
    run = env.spawn("--gateway", "gw-big", "--concurrency", "1", "--qps", "2")
    wait_for(
        lambda: any(any(e["written"] for e in j["providers"].values()) for j in env.journals()),
        timeout=30,
        what="first write recorded in the journal",
    )
    run.signal(sig)
    code = run.wait(timeout=60)
    assert code == 8, run.output
    assert f"interrupted by {signal.Signals(sig).name}" in run.output
    journal = env.journals()[-1]
    assert journal["state"] == "restored"
    written = [n for n, e in journal["providers"].items() if e["written"]]
    assert written and len(written) < 8  # stopped issuing writes part-way
    assert all(e["restored"] == "restored" for e in journal["providers"].values() if e["written"])
    assert all(env.drain_value(n) is None for n in BIG)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_wait_keeps_applied_state_and_names_the_unconfirmed(env: DrainEnv, sig):
    env.agn.stop("gateway-c-b")
    run = env.spawn("--provider", "p1", "--timeout", "120", *env.targets())
    wait_for(lambda: any(line.startswith("waiting for") for line in run.lines), timeout=30, what="the wait to start")
    wait_for(lambda: any("consumer c-b" in line for line in run.lines), timeout=30, what="c-b reported lagging")
    run.signal(sig)
    code = run.wait(timeout=30)
    assert code == 8, run.output
    assert "the applied state is kept" in run.output and "consumer c-b" in run.output.splitlines()[-1]
    assert env.drain_value("p1") is True
    assert env.journals()[-1]["state"] == "applied-interrupted"


def test_under_nohup_a_hangup_does_not_stop_the_drain(env: DrainEnv):
    """Started as ``nohup`` starts it (SIGHUP ignored), a run the terminal hangs up on goes on."""
    run = env.spawn("--gateway", "gw-big", "--concurrency", "1", "--qps", "2", nohup=True)
    wait_for(
        lambda: any(any(e["written"] for e in j["providers"].values()) for j in env.journals()),
        timeout=30,
        what="first write recorded in the journal",
    )
    run.signal(signal.SIGHUP)
    assert run.wait(timeout=60) == 0, run.output
    assert "interrupted" not in run.output
    assert all(env.drain_value(n) is (gw == "gw-big" or None) for n, (gw, _, _) in BIG.items())


def test_kill_9_then_journal_restore(env: DrainEnv):
    run = env.spawn("--gateway", "gw-big", "--concurrency", "1", "--qps", "2", "--reason", "rack move")
    wait_for(
        lambda: sum(e["written"] for j in env.journals() for e in j["providers"].values()) >= 2,
        timeout=30,
        what="two writes recorded",
    )
    run.signal(signal.SIGKILL)
    assert run.wait(timeout=10) == -signal.SIGKILL
    journal_path = env.journal_paths()[-1]
    written = [n for n, e in env.journals()[-1]["providers"].items() if e["written"]]
    assert all(env.drain_value(n) is True for n in written)
    restore = env.restore(journal_path)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    for name in written:
        assert f"{name}: restored" in restore.stdout
        assert env.drain_value(name) is None
        assert REASON not in (env.provider(name)["metadata"].get("annotations") or {})
    again = env.restore(journal_path)
    assert again.returncode == 0 and "nothing to restore" in again.stdout


def test_second_signal_stops_at_once_and_points_at_the_journal(env: DrainEnv):
    run = env.spawn("--gateway", "gw-big", "--concurrency", "1", "--qps", "2")
    wait_for(
        lambda: any(any(e["written"] for e in j["providers"].values()) for j in env.journals()),
        timeout=30,
        what="first write recorded in the journal",
    )
    # Two different signals: identical standard signals sent back to back merge into one.
    run.signal(signal.SIGINT)
    run.signal(signal.SIGTERM)
    code = run.wait(timeout=30)
    assert code == 5, run.output
    journal_path = str(env.journal_paths()[-1])
    assert "second signal: stopping at once" in run.output
    assert f"journal: {journal_path}" in run.output
    assert f"python -m xtask env drain-restore {journal_path}" in run.output
    # What it left behind is recoverable from the journal.
    restore = env.restore(journal_path)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert all(env.drain_value(n) is None for n in BIG)
