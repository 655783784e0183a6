"""Kubernetes Events on the real API server: what a drain, an undrain, a restoration and
``drain-restore`` record on each provider, what the real operator records on consumers and
providers (transitions only), what ``kubectl describe`` shows, and that an Event the API
server refuses never fails a drain.

The CLI runs as a subprocess, as a user runs it; where least privilege matters it runs as a
real ServiceAccount token bound to the shipped Role (``manifests/rbac/provider-drain.yaml``).
"""

from __future__ import annotations

import getpass
import socket
import subprocess

import pytest

from agn.events import Regarding, Reporter, event_body, event_name, micro_time
from agn.kube import CONSUMERS, PROVIDERS
from agnprocs import sample, scrape, wait_for
from drainenv import CONSUMER_NAMES, DrainEnv
from kubetest import apply_identities, drain_identity_objects, events, service_account_kubeconfig
from reportschema import parse_report
from test_provider_drain_failures import BIG, label, reject_real_writes, wait_policy_active  # noqa: F401 - a fixture
from xtask.reports import PROVIDER_DRAIN
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration

WHO = f"{getpass.getuser()}@{socket.gethostname()}"


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    # A short resync, so "nothing new is recorded across many reconciles" is quick to observe.
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(operator_args=("--resync", "0.3"))


@pytest.mark.parametrize("at", [1_700_000_000.0, 1_700_000_000.123456])
def test_an_event_at_a_whole_second_is_stored_with_its_microseconds(kube, namespace, at):
    # The generated EventsV1Api would send a whole second as "...:20+00:00", which the API server
    # rejects as a MicroTime; the Event must reach the server exactly as built.
    body = event_body(
        name=event_name("p", f"{at}"),
        regarding=Regarding("InferenceProvider", "p", namespace, uid="u-1"),
        reason="ProviderDrained",
        action="Drain",
        note="n",
        type_="Normal",
        reporter=Reporter("agn.dev/provider-drain", "test"),
        at=at,
    )
    kube.create_event(namespace, body)
    assert only(events(kube, namespace, regarding="p"))["eventTime"] == micro_time(at)


def provider_events(env: DrainEnv, name: str, reason: str | None = None) -> list[dict]:
    return events(env.kube, env.ns, regarding=name, reason=reason)


def only(items: list[dict]) -> dict:
    assert len(items) == 1, items
    return items[0]


def test_drain_and_undrain_record_one_event_per_changed_provider(env: DrainEnv):
    code, report = env.run_json("--gateway", "gw-a", "--reason", "rack 7 power work", *env.targets())
    assert code == 0, report
    operation = report["operation"]
    for name in ("p-one", "p-two"):
        event = only(provider_events(env, name, "ProviderDrained"))
        provider = env.provider(name)
        assert event["type"] == "Normal" and event["action"] == "Drain"
        assert event["regarding"] == {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceProvider",
            "name": name,
            "namespace": env.ns,
            "uid": provider["metadata"]["uid"],
        }
        assert event["reportingController"] == "agn.dev/provider-drain" and event["reportingInstance"] == WHO
        note = event["note"]
        assert "reason: rack 7 power work" in note and f"operation {operation} by {WHO}" in note
        assert "context local-tests" in note and "kube user local-tests" in note
    assert provider_events(env, "p-three") == provider_events(env, "p-four") == []  # not selected

    # Running the same drain again changes nothing, so it records nothing.
    code, report = env.run_json("--gateway", "gw-a", *env.targets())
    assert code == 0 and {o["outcome"] for o in report["outcomes"]} == {"unchanged"}
    assert len(provider_events(env, "p-one", "ProviderDrained")) == 1

    code, report = env.run_json("--provider", "p-one", "--undrain", *env.targets())
    assert code == 0, report
    event = only(provider_events(env, "p-one", "ProviderUndrained"))
    assert event["type"] == "Normal" and event["action"] == "Undrain"
    assert f"operation {report['operation']}" in event["note"] and "reason:" not in event["note"]
    assert provider_events(env, "p-two", "ProviderUndrained") == []


def test_kubectl_describe_and_get_events_show_the_history(env: DrainEnv):
    code, report = env.run_json("--provider", "p-three", "--reason", "disk swap")
    assert code == 0, report
    kubectl = str(ensure_assets(build=False) / "kubectl")

    def run(*args: str) -> str:
        out = subprocess.run(
            [kubectl, "--context", env.cp.context, "--namespace", env.ns, *args],
            capture_output=True,
            text=True,
            env=env.env(),
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    described = run("describe", "inferenceprovider", "p-three")
    events_section = described.split("Events:", 1)[1]
    assert "ProviderDrained" in events_section and "disk swap" in events_section
    listed = run("get", "events", "--field-selector", "involvedObject.name=p-three")
    assert "ProviderDrained" in listed and "inferenceprovider/p-three" in listed.lower()


def test_a_failed_write_and_the_restoration_are_recorded(kube, namespace, agn, control_plane, tmp_path, request):
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=BIG)
    token = request.getfixturevalue("reject_real_writes")
    label(env, "p5", "reject-writes", token)
    wait_policy_active(env, "p5")
    code, report = env.run_json("--gateway", "gw-big", "--concurrency", "2", "--reason", "firmware")
    assert code == 3, report  # refused by the API server at the write, the others restored
    failed = only(provider_events(env, "p5"))
    assert (failed["reason"], failed["type"], failed["action"]) == ("DrainFailed", "Warning", "Drain")
    assert "frozen" in failed["note"] and "reason: firmware" in failed["note"]
    changed = [o["provider"] for o in report["outcomes"] if o["outcome"] == "changed"]
    assert changed
    for name in changed:
        reasons = [e["reason"] for e in provider_events(env, name)]
        assert reasons == ["ProviderDrained", "DrainRestored"], (name, reasons)
        restored = only(provider_events(env, name, "DrainRestored"))
        assert restored["action"] == "Restore" and "spec.trafficPolicy.drain back to omitted" in restored["note"]


def test_drain_restore_records_what_it_put_back(env: DrainEnv):
    run = env.spawn("--gateway", "gw-a", "--concurrency", "1", "--qps", "1", "--reason", "rack move")
    wait_for(
        lambda: any(e["written"] for j in env.journals() for e in j["providers"].values()),
        timeout=30,
        what="a write recorded in the journal",
    )
    run.signal(9)
    run.wait(timeout=10)
    written = [n for n, e in env.journals()[-1]["providers"].items() if e["written"]]
    journal = env.journal_paths()[-1]
    restore = env.restore(journal)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    operation = env.journals()[-1]["operation"]
    for name in written:
        event = only(provider_events(env, name, "DrainRestored"))
        assert f"operation {operation}" in event["note"] and "reason: rack move" in event["note"]
        assert event["regarding"]["uid"] == env.provider(name)["metadata"]["uid"]


def _drain_identity(env: DrainEnv, *, with_events: bool):
    """The shipped agn-provider-drain ServiceAccount, Role and RoleBinding in the test namespace
    (the Role without its Events rule when ``with_events`` is False); returns a kubeconfig for it."""
    objects = drain_identity_objects(env.ns)  # this test's one network "net": its drain lock agn-drain-net
    for obj in objects:
        if obj["kind"] == "Role" and not with_events:
            obj["rules"] = [r for r in obj["rules"] if "events.k8s.io" not in r["apiGroups"]]
    apply_identities(env.kube, env.ns, objects)
    return service_account_kubeconfig(
        env.kube, env.cp.kubeconfig, env.ns, "agn-provider-drain", env.tmp / "drain-sa.kubeconfig"
    )


def _run_as(env: DrainEnv, kubeconfig, *args: str) -> subprocess.CompletedProcess:
    argv = [a for a in env.argv(*args) if a not in ("--context", env.cp.context)]
    return subprocess.run(
        [*argv, "--kubeconfig", str(kubeconfig), "--output", "json"],
        capture_output=True,
        text=True,
        env=env.env(),
        timeout=120,
    )


def test_the_shipped_drain_role_is_enough_to_drain_converge_and_record_events(env: DrainEnv):
    kubeconfig = _drain_identity(env, with_events=True)
    out = _run_as(env, kubeconfig, "--gateway", "gw-b", "--reason", "maintenance", *env.targets())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "could not record" not in out.stderr
    assert parse_report(out.stdout, PROVIDER_DRAIN)["events"] == {"recorded": 2, "notRecorded": []}
    for name in ("p-three", "p-four"):
        event = only(provider_events(env, name, "ProviderDrained"))
        assert "kube user agn-provider-drain" in event["note"]


def test_events_the_api_server_refuses_warn_once_and_the_drain_still_succeeds(env: DrainEnv):
    kubeconfig = _drain_identity(env, with_events=False)
    out = _run_as(env, kubeconfig, "--gateway", "gw-b", *env.targets())
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr.count("could not record") == 1, out.stderr
    assert "could not record 2 Kubernetes Event(s)" in out.stderr and "forbidden" in out.stderr.lower()
    assert env.drain_value("p-three") is True and env.drain_value("p-four") is True
    assert provider_events(env, "p-three") == provider_events(env, "p-four") == []
    report = parse_report(out.stdout, PROVIDER_DRAIN)  # the report says so too, per provider
    assert report["events"]["recorded"] == 0 and report["exit"]["code"] == 0
    assert sorted(e.split(":")[0] for e in report["events"]["notRecorded"]) == ["p-four", "p-three"]


# -- the operator's Events -------------------------------------------------------------------------


def reconciles(env: DrainEnv) -> float:
    return sample(scrape(f"{env.operator_url}/metrics"), "agn_operator_reconcile_duration_seconds_count") or 0.0


def wait_reconciles(env: DrainEnv, more: int) -> None:
    """Wait (a condition, not a sleep) until the operator has reconciled ``more`` more times."""
    start = reconciles(env)
    wait_for(lambda: reconciles(env) >= start + more, timeout=30, what=f"{more} more reconciles")


def test_operator_records_each_publication_on_the_consumer_with_its_revision(env: DrainEnv):
    before = {c: len(events(env.kube, env.ns, regarding=c, reason="OverlayPublished")) for c in CONSUMER_NAMES}
    assert all(before.values())  # the first revision was published, and recorded, on the way up
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 0, report
    for c in CONSUMER_NAMES:
        revision = env.overlay(c)["revision"]

        def published(c=c, revision=revision):
            found = events(env.kube, env.ns, regarding=c, reason="OverlayPublished")
            return [e for e in found if f"revision {revision} " in e["note"]]

        event = only(wait_for(published, timeout=20, what=f"OverlayPublished for {c} revision {revision}"))
        assert event["regarding"]["kind"] == "InferenceConsumer"
        assert event["regarding"]["uid"] == env.kube.get(CONSUMERS, env.ns, c)["metadata"]["uid"]
        assert event["reportingController"] == "agn.dev/operator" and event["type"] == "Normal"
        assert "p-one: admitted -> existing_only" in event["note"] and f"was revision {revision - 1}" in event["note"]
    # Many reconciles later, no publication happened and none was recorded.
    wait_reconciles(env, 20)
    after = {c: len(events(env.kube, env.ns, regarding=c, reason="OverlayPublished")) for c in CONSUMER_NAMES}
    assert after == {c: before[c] + 1 for c in CONSUMER_NAMES}


def test_operator_records_a_hard_failure_once_and_its_end_once(env: DrainEnv):
    env.set_health("p-four", False)
    excluded = wait_for(
        lambda: provider_events(env, "p-four", "ProviderExcluded"), timeout=30, what="ProviderExcluded on p-four"
    )
    event = only(excluded)
    assert event["type"] == "Warning" and event["regarding"]["kind"] == "InferenceProvider"
    assert "(unavailable)" in event["note"] and "health check failed" in event["note"] and "HTTP 503" in event["note"]
    # It stays unhealthy through many probes and reconciles: still exactly one Event.
    wait_reconciles(env, 20)
    assert len(provider_events(env, "p-four", "ProviderExcluded")) == 1
    assert provider_events(env, "p-three") == []  # healthy all along: nothing to report

    env.set_health("p-four", True)
    eligible = wait_for(
        lambda: provider_events(env, "p-four", "ProviderEligible"), timeout=30, what="ProviderEligible on p-four"
    )
    assert only(eligible)["type"] == "Normal"
    wait_reconciles(env, 20)
    assert [e["reason"] for e in provider_events(env, "p-four")] == ["ProviderExcluded", "ProviderEligible"]
    health = env.kube.get(PROVIDERS, env.ns, "p-four")["status"]["probe"]["healthy"]
    assert health is True
