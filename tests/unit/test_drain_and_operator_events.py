"""Kubernetes Events as data: their shape and limits, which facts a drain records, and which
transitions the operator reports (once, never in a loop). Pure; the I/O is tested against the
real API server in tests/integration/test_events.py."""

from __future__ import annotations

import re

import pytest

from agn.events import NOTE_LIMIT, Regarding, Reporter, clip, event_body, event_name, micro_time
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Exclusion, Overlay, ProviderView
from agn.operator.diffing import diff_candidates, published_note, state_changes
from agn.operator.events import HardFailures, Transition, failure_detail, observed
from xtask.drain.core.states import Outcome, Restoration, RestoreOutcome, WriteOutcome
from xtask.drain.edges.kube_events import (
    DRAIN_FAILED,
    DRAINED,
    RESTORE_FAILED,
    RESTORED,
    UNDRAINED,
    Byline,
    Fact,
    note,
    outcome_facts,
    restoration_facts,
)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# -- agn.events ---------------------------------------------------------------------------------
def test_event_names_are_valid_deterministic_dns_subdomains():
    name = event_name("p-one", "20261203T101010Z-ab12cd", "ProviderDrained")
    assert name == "p-one.20261203t101010z-ab12cd.providerdrained"
    assert event_name("p-one", "20261203T101010Z-ab12cd", "ProviderDrained") == name
    long = event_name("p" * 250, "op", "DrainRestored")
    assert len(long) <= 253 and DNS_SUBDOMAIN.match(long) and long.endswith(".op.drainrestored")
    assert DNS_SUBDOMAIN.match(event_name("x", "A_B C", "--"))


def test_notes_are_clipped_to_the_api_limit_in_bytes_without_splitting_a_character():
    text = "é" * 1000  # 2000 bytes
    clipped = clip(text, NOTE_LIMIT)
    assert len(clipped.encode()) <= NOTE_LIMIT and clipped.endswith("…")
    assert clip("short", NOTE_LIMIT) == "short"


def test_event_body_has_what_the_api_server_requires():
    regarding = Regarding("InferenceProvider", "p-one", "ns", uid="u-1")
    body = event_body(
        name="p-one.x",
        regarding=regarding,
        reason="ProviderDrained",
        action="Drain",
        note="n" * 5000,
        type_="Normal",
        reporter=Reporter("agn.dev/provider-drain", "i" * 300),
        at=1_700_000_000.5,
    )
    assert body["apiVersion"] == "events.k8s.io/v1" and body["metadata"] == {"name": "p-one.x", "namespace": "ns"}
    assert body["eventTime"] == "2023-11-14T22:13:20.500000Z" == micro_time(1_700_000_000.5)
    assert body["regarding"] == {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "InferenceProvider",
        "name": "p-one",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert len(body["note"].encode()) <= 1024 and len(body["reportingInstance"]) <= 128
    with pytest.raises(ValueError, match="Normal or Warning"):
        event_body(
            name="x",
            regarding=regarding,
            reason="r",
            action="a",
            note="",
            type_="Info",
            reporter=Reporter("c/d", "i"),
            at=0,
        )


# -- what a drain records ---------------------------------------------------------------------------
def test_only_changed_and_failed_writes_are_recorded():
    outcomes = [
        Outcome("a", WriteOutcome.CHANGED),
        Outcome("b", WriteOutcome.UNCHANGED),
        Outcome("c", WriteOutcome.FAILED, error="denied by policy"),
        Outcome("d", WriteOutcome.NOT_ATTEMPTED),
    ]
    assert outcome_facts(outcomes, drain=True) == [
        Fact("a", DRAINED, "Drain", "Normal"),
        Fact("c", DRAIN_FAILED, "Drain", "Warning", "denied by policy"),
    ]
    assert [f.reason for f in outcome_facts(outcomes, drain=False)] == [UNDRAINED, "UndrainFailed"]


def test_restorations_record_what_was_put_back_and_what_could_not_be():
    restorations = [
        Restoration("a", RestoreOutcome.RESTORED),
        Restoration("b", RestoreOutcome.RESTORED),
        Restoration("c", RestoreOutcome.ALREADY),
        Restoration("d", RestoreOutcome.OTHER_WRITER),
        Restoration("e", RestoreOutcome.FAILED, error="HTTP 500"),
        Restoration("f", RestoreOutcome.GONE),
        Restoration("g", RestoreOutcome.WOULD_RESTORE),
    ]
    facts = restoration_facts(restorations, previous={"a": None, "b": False})
    assert [(f.provider, f.reason, f.type) for f in facts] == [
        ("a", RESTORED, "Normal"),
        ("b", RESTORED, "Normal"),
        ("d", RESTORE_FAILED, "Warning"),
        ("e", RESTORE_FAILED, "Warning"),
    ]
    assert facts[0].detail.endswith("back to omitted") and facts[1].detail.endswith("back to false")
    assert "another writer" in facts[2].detail and facts[3].detail == "HTTP 500"


def test_the_note_says_what_why_which_operation_and_who():
    text = note(
        Fact("a", DRAIN_FAILED, "Drain", "Warning", "denied"),
        Byline(operation="op-1", actor="alice@host", context="local-example", user="admin", reason="rack move"),
    )
    assert text == (
        "drain failed: denied; reason: rack move; operation op-1 by alice@host (kube user admin, context local-example)"
    )
    bare = note(
        Fact("a", DRAINED, "Drain", "Normal"),
        Byline(operation="op", actor="bob@h", context=None, user=None, reason=None),
    )
    assert bare == "drained; operation op by bob@h"


def test_a_capacity_guard_overridden_by_force_is_said_on_provider_drained_only():
    said = {
        reason: note(
            Fact("a", reason, "Drain", "Normal"),
            Byline(
                operation="op",
                actor="bob@h",
                context=None,
                user=None,
                reason=None,
                capacity_override="network net, group 'chat': exceeds (load 6, headroom 5)",
            ),
        )
        for reason in (DRAINED, RESTORED)
    }
    assert said[DRAINED] == (
        "drained; capacity guard overridden (--force): network net, group 'chat': exceeds (load 6, headroom 5); "
        "operation op by bob@h"
    )
    assert "capacity" not in said[RESTORED]


# -- what the operator records ---------------------------------------------------------------------
def cand(provider: str, state: str) -> Candidate:
    return Candidate(f"c-{provider}", provider, f"http://{provider}", "g", 0, state)


def overlay(revision: int, *cands: Candidate) -> Overlay:
    return Overlay("net", "c1", revision, f"d{revision}", cands)


def test_a_publication_names_its_revision_and_each_admission_change():
    old = overlay(3, cand("a", ADMITTED), cand("b", ADMITTED), cand("c", ADMITTED))
    new = overlay(4, cand("a", EXISTING_ONLY), cand("b", ADMITTED), cand("d", ADMITTED))
    changes = state_changes(diff_candidates(old.candidates, new.candidates))
    assert changes == ["a: admitted -> existing_only", "c: removed", "d: added (admitted)"]
    assert published_note(old, new) == (
        "published overlay revision 4 of network net: 2 admitted, 1 existing_only "
        "(was revision 3; a: admitted -> existing_only, c: removed, d: added (admitted))"
    )
    assert published_note(None, overlay(1, cand("a", ADMITTED))).endswith(
        "1 admitted, 0 existing_only (first revision)"
    )


def test_hard_failures_are_reported_on_transitions_only():
    seen = HardFailures()
    assert seen.observe("net", "p", "u1", None) is None  # healthy when first seen: nothing to say
    assert seen.observe("net", "p", "u1", Exclusion.UNAVAILABLE) == Transition("net", "p", Exclusion.UNAVAILABLE)
    for _ in range(100):  # probe after probe, resync after resync
        assert seen.observe("net", "p", "u1", Exclusion.UNAVAILABLE) is None
    assert seen.observe("net", "p", "u1", Exclusion.STALE) == Transition("net", "p", Exclusion.STALE)
    assert seen.observe("net", "p", "u1", None) == Transition("net", "p", None)
    assert seen.observe("net", "p", "u1", None) is None
    # Another network is reported on its own; a recreated provider (new uid) starts afresh.
    assert seen.observe("other", "p", "u1", Exclusion.UNTRUSTED) == Transition("other", "p", Exclusion.UNTRUSTED)
    assert seen.observe("net", "p", "u2", Exclusion.INVALID) == Transition("net", "p", Exclusion.INVALID)
    assert seen.observe("net", "q", "u3", Exclusion.INVALID) == Transition("net", "q", Exclusion.INVALID)


def test_hard_failure_memory_of_deleted_providers_is_dropped():
    seen = HardFailures()
    seen.observe("net", "p", "u1", Exclusion.UNAVAILABLE)
    seen.observe("net", "q", "u2", Exclusion.UNAVAILABLE)
    seen.forget({"q"})
    assert seen.remembered() == {"q"}
    # A provider of the same name created later is news again.
    assert seen.observe("net", "p", "u1", Exclusion.UNAVAILABLE) is not None


def test_failure_details_name_the_cause():
    provider = {
        "spec": {"endpoint": "ftp://x"},
        "status": {"probe": {"healthError": "GET /healthz: HTTP 503", "metricsError": "GET /metrics: HTTP 404"}},
    }
    assert failure_detail(Exclusion.INVALID, provider, network="n", max_age=45) == (
        "endpoint 'ftp://x' is not an http(s) URL with a host"
    )
    assert "HTTP 503" in failure_detail(Exclusion.UNAVAILABLE, provider, network="n", max_age=45)
    assert failure_detail(Exclusion.STALE, provider, network="n", max_age=45) == (
        "no successful metrics scrape within 45s: GET /metrics: HTTP 404"
    )
    assert "network n" in failure_detail(Exclusion.UNTRUSTED, provider, network="n", max_age=45)


def test_a_provider_not_probed_yet_is_not_reported_but_an_invalid_endpoint_is():
    # An invalid endpoint is never dialled, so it never gets a health result: it is observed anyway.
    assert not observed(ProviderView("p", "http://p:8080", "c-p"))
    assert observed(ProviderView("p", "http://p:8080", "c-p", healthy=False))
    assert observed(ProviderView("p", "ftp://p", "c-p"))
