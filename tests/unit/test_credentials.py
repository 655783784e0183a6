"""Providers' credentials (agn/credentials.py): the Secret reference, the token cache, the named
errors, and what a probe's outcome and a status say about them — never the token."""

from __future__ import annotations

import pytest

from agn.credentials import (
    DEFAULT_TTL,
    CredentialsError,
    SecretRef,
    Tokens,
    authorization_of,
    no_secrets,
    token_from,
)
from agn.gateway.validation import InvalidOverlay, validate_overlay
from agn.kube import Forbidden, NotFound, Unreachable
from agn.model import ADMITTED, Candidate, ConsumerView, Overlay, ProviderView, candidate_for, overlay_digest
from agn.objects import provider_view
from agn.operator.credentials import unresolved, with_refusals_named
from agn.operator.provider_status import ProbeOutcome, next_status

TOKEN = "s3cr3t-token-value"
REF = SecretRef("engine-key", "token")


class FakeSecrets:
    """A SecretReader over a dict, counting reads; a missing name is NotFound."""

    def __init__(self, secrets: dict[str, dict[str, bytes]]) -> None:
        self.secrets = secrets
        self.reads = 0
        self.error: Exception | None = None  # set: every read fails so (an unreachable API server)

    def __call__(self, name: str) -> dict[str, bytes]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        if name not in self.secrets:
            raise NotFound(f'secrets "{name}" not found', status=404)
        return self.secrets[name]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_reference_is_read_from_a_spec_and_written_back_as_the_crd_holds_it():
    spec = {"authorization": {"type": "Bearer", "credentials": {"name": "engine-key", "key": "token"}}}
    assert authorization_of(spec) == REF
    assert REF.to_dict() == spec["authorization"]
    assert authorization_of({}) is None
    assert authorization_of({"authorization": {"credentials": {"name": "x"}}}) is None  # no key: none


def test_a_token_is_trimmed_and_a_bad_one_is_a_named_error_that_never_quotes_it():
    assert token_from({"token": f"  {TOKEN}\n".encode()}, REF) == TOKEN
    with pytest.raises(CredentialsError) as missing:
        token_from({"other": b"x"}, REF)
    assert missing.value.reason == "SecretKeyNotFound"
    assert str(missing.value) == "secret engine-key has no key token (spec.authorization.credentials)"
    for bad in (b"   \n", f"{TOKEN}\r\nX-Injected: 1".encode(), b"\xff\xfe", b"a" * 9000):
        with pytest.raises(CredentialsError) as exc:
            token_from({"token": bad}, REF)
        assert exc.value.reason == "InvalidCredentials"
        assert "X-Injected" not in str(exc.value) and TOKEN not in str(exc.value)


def test_tokens_are_read_once_per_ttl_and_again_after_forget_so_a_rotation_takes_effect():
    secrets, clock = FakeSecrets({"engine-key": {"token": TOKEN.encode()}}), Clock()
    tokens = Tokens(secrets, clock=clock)
    assert tokens.token(REF) == TOKEN and tokens.token(REF) == TOKEN
    assert secrets.reads == 1
    secrets.secrets["engine-key"] = {"token": b"rotated"}
    clock.now += DEFAULT_TTL - 0.1
    assert tokens.token(REF) == TOKEN  # within the bound: the cached one
    clock.now += 0.2
    assert tokens.token(REF) == "rotated" and secrets.reads == 2
    secrets.secrets["engine-key"] = {"token": b"again"}
    tokens.forget(REF)  # the engine refused it
    assert tokens.token(REF) == "again" and secrets.reads == 3


def test_references_no_one_asks_for_are_dropped_within_two_ttls():
    secrets, clock = FakeSecrets({f"s{i}": {"token": b"t"} for i in range(3)}), Clock()
    tokens = Tokens(secrets, clock=clock)
    for i in range(3):
        tokens.token(SecretRef(f"s{i}", "token"))
    assert len(tokens) == 3
    clock.now += 2 * DEFAULT_TTL
    tokens.token(SecretRef("s0", "token"))  # re-read; the sweep drops s1 and s2
    assert len(tokens) == 1


def test_an_unanswered_read_keeps_the_last_token_and_a_deleted_secret_does_not():
    secrets, clock = FakeSecrets({"engine-key": {"token": TOKEN.encode()}}), Clock()
    tokens = Tokens(secrets, clock=clock)
    assert tokens.token(REF) == TOKEN
    secrets.error = Unreachable("the API server did not answer within 20 s")
    clock.now += DEFAULT_TTL
    assert tokens.token(REF) == TOKEN  # a blip of the API server takes no keyed provider out
    secrets.error = None
    del secrets.secrets["engine-key"]
    clock.now += DEFAULT_TTL
    with pytest.raises(CredentialsError, match="not found"):
        tokens.token(REF)
    secrets.error = Unreachable("the API server did not answer within 20 s")
    clock.now += DEFAULT_TTL
    with pytest.raises(CredentialsError) as exc:  # nothing good to keep
        tokens.token(REF)
    assert exc.value.reason == "SecretUnreadable"


def test_a_missing_secret_is_cached_as_an_error_for_the_ttl_then_read_again():
    secrets, clock = FakeSecrets({}), Clock()
    tokens = Tokens(secrets, clock=clock)
    for _ in range(3):
        with pytest.raises(CredentialsError) as exc:
            tokens.token(REF)
        assert exc.value.reason == "SecretNotFound"
        assert str(exc.value) == "secret engine-key not found (spec.authorization.credentials)"
    assert secrets.reads == 1
    secrets.secrets["engine-key"] = {"token": TOKEN.encode()}
    clock.now += DEFAULT_TTL
    assert tokens.token(REF) == TOKEN


@pytest.mark.parametrize(
    "error, reason",
    [
        (Forbidden("secrets is forbidden: User cannot get", status=403), "SecretForbidden"),
        (Unreachable("connection refused"), "SecretUnreadable"),
    ],
)
def test_read_errors_are_named(error, reason):
    def read(name):
        raise error

    with pytest.raises(CredentialsError) as exc:
        Tokens(read).token(REF)
    assert exc.value.reason == reason and "engine-key" in str(exc.value)
    with pytest.raises(CredentialsError) as none:
        Tokens(no_secrets).token(REF)
    assert none.value.reason == "SecretForbidden"


def test_a_refused_probe_is_named_with_the_secret_to_check_and_a_clean_one_is_left_alone():
    outcome = ProbeOutcome(1.0, True, True, None, metrics_error="GET /metrics: HTTP 401", health_path="/health")
    named = with_refusals_named(outcome, REF)
    assert named.metrics_reason == "Unauthorized"
    assert (
        named.metrics_error
        == "GET /metrics: 401 Unauthorized; check spec.authorization.credentials secret engine-key key token"
    )
    assert named.health_reason is None and named.healthy is True
    both = with_refusals_named(
        ProbeOutcome(1.0, True, False, "GET /healthz: HTTP 403", metrics_error="GET /metrics: HTTP 401"), None
    )
    assert (both.health_reason, both.metrics_reason) == ("Forbidden", "Unauthorized")
    assert both.health_error == "GET /healthz: 403 Forbidden; the engine asks for credentials: set spec.authorization"
    clean = ProbeOutcome(1.0, True, False, "GET /healthz: HTTP 503", metrics_error="GET /metrics: HTTP 404")
    assert with_refusals_named(clean, REF) is clean


def test_the_status_carries_the_named_reasons():
    refused = with_refusals_named(ProbeOutcome(1.0, True, True, metrics_error="GET /metrics: HTTP 401"), REF)
    status = next_status({}, refused, uid="u", generation=1, endpoint="http://h", networks=[])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert conditions["MetricsFresh"]["reason"] == "Unauthorized"
    assert "check spec.authorization.credentials secret engine-key key token" in conditions["MetricsFresh"]["message"]
    missing = unresolved(CredentialsError("SecretNotFound", "secret engine-key not found"), now=2.0)
    status = next_status(status, missing, uid="u", generation=1, endpoint="http://h", networks=[])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert status["probe"]["healthy"] is False
    assert (conditions["Available"]["status"], conditions["Available"]["reason"]) == ("False", "SecretNotFound")
    assert conditions["MetricsFresh"]["reason"] == "SecretNotFound"
    assert status["probe"]["healthError"] == "credentials: secret engine-key not found"


def test_a_candidate_carries_the_reference_and_digests_as_before_without_one():
    spec = {"endpoint": "http://h", "selectionGroup": "g", "authorization": REF.to_dict()}
    obj = {"metadata": {"name": "p", "uid": "u"}, "spec": spec, "status": {"probe": {"healthy": True}}}
    view = provider_view(obj)
    assert view.authorization == REF
    cand = candidate_for(view, None, _consumer())
    assert cand is not None and cand.authorization == REF
    assert cand.to_dict()["authorization"] == {"type": "Bearer", "credentials": {"name": "engine-key", "key": "token"}}
    assert Candidate.from_dict(cand.to_dict()) == cand
    plain = Candidate(cand.id, "p", "http://h", "g", 0, ADMITTED)
    assert "authorization" not in plain.to_dict() and "authorization" not in plain.row
    assert overlay_digest([plain]) != overlay_digest([cand])  # a changed reference is a new revision


def test_the_gateway_refuses_an_overlay_whose_reference_is_malformed():
    cand = Candidate("c-1", "p", "http://h", "g", 0, ADMITTED, authorization=REF)
    overlay = Overlay("net", "c1", 1, overlay_digest([cand]), (cand,))
    assert validate_overlay(overlay.to_spec(), consumer="c1").candidates[0].authorization == REF
    bad = overlay.to_spec()
    bad["candidates"][0]["authorization"] = {"credentials": {"name": "engine-key"}}
    with pytest.raises(InvalidOverlay, match="authorization must name a Secret"):
        validate_overlay(bad, consumer="c1")


def _consumer() -> ConsumerView:
    return ConsumerView("c1", "net")


def test_provider_view_default_has_no_reference():
    assert ProviderView("p", "http://h", "c").authorization is None
