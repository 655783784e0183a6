"""One probe of a provider with its credentials (``spec.authorization``, :mod:`agn.credentials`).

A provider that names a Secret is probed with ``Authorization: Bearer <token>`` on its health
and metrics requests. When the token cannot be had (the Secret or its key is missing, RBAC
forbids reading it) nothing is dialled: the provider is unavailable with that reason
(``SecretNotFound``, ``SecretKeyNotFound``, ``InvalidCredentials``, ``SecretForbidden``,
``SecretUnreadable``), as a ServiceMonitor naming a missing Secret is not scraped. An engine's
401 or 403 becomes a named error (reason ``Unauthorized`` or ``Forbidden``) that says which
Secret key to check, and makes the next probe read the Secret again (it may have been rotated).
llama.cpp's server keeps ``/health`` public (and ``auto`` asks it after the 401s of the paths
before it), so a wrong token leaves it available with its load unknown (``MetricsFresh``
False, ``Unauthorized``): not admitted, as no network admits a provider without a fresh scrape.
SGLang keeps ``/metrics`` public and answers 401 on ``/get_model_info`` while up: available,
its condition's message naming the Secret key to check.

No message here or in the outcome ever holds the token.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import aiohttp

from agn.credentials import (
    CredentialsError,
    SecretRef,
    Tokens,
    authorization_of,
    bearer,
    refusal_hint,
    refused_message,
)
from agn.objects import metrics_format_of
from agn.operator.probe_http import probe_endpoint_async
from agn.operator.provider_status import ProbeOutcome

# How agn.operator.probe_http words a request the provider answered with a status it refused.
_REFUSED = re.compile(r"GET (?P<path>\S+): HTTP (?P<code>401|403)")


async def probe_provider(
    session: aiohttp.ClientSession, spec: Mapping[str, Any], *, tokens: Tokens, timeout: float, now: float
) -> ProbeOutcome:
    """One probe round of the provider with ``spec``, with its credentials; never raises."""
    ref = authorization_of(spec)
    headers = None
    if ref is not None:
        try:
            headers = bearer(await tokens.token_async(ref))
        except CredentialsError as exc:
            return unresolved(exc, now=now)
    outcome = await probe_endpoint_async(
        session,
        str(spec.get("endpoint", "")),
        timeout=timeout,
        now=now,
        metrics_format=metrics_format_of(spec),
        headers=headers,
    )
    named = with_refusals_named(outcome, ref)
    if ref is not None and named is not outcome:
        tokens.forget(ref)
    return named


def unresolved(exc: CredentialsError, *, now: float) -> ProbeOutcome:
    """The outcome of a probe that could not be sent: its credentials cannot be had."""
    message = f"credentials: {exc}"
    return ProbeOutcome(
        observed_at=now,
        probed=True,
        healthy=False,
        health_error=message,
        metrics_error=message,
        health_reason=exc.reason,
        metrics_reason=exc.reason,
    )


def with_refusals_named(outcome: ProbeOutcome, ref: SecretRef | None) -> ProbeOutcome:
    """``outcome`` with each 401/403 answer named (reason and what to check); the same object
    when there was none. SGLang's health path answers 401 while it is up behind its key
    (``health_note``): that note says what to check too, the provider staying available."""
    changes: dict[str, Any] = {}
    if outcome.health_note and outcome.health_note.startswith("HTTP 401"):
        changes["health_note"] = f"{outcome.health_note}; {refusal_hint(ref)}"
    for error, reason in (("health_error", "health_reason"), ("metrics_error", "metrics_reason")):
        match = _REFUSED.fullmatch(getattr(outcome, error) or "")
        if match is not None:
            changes[reason], changes[error] = refused_message(f"GET {match['path']}", int(match["code"]), ref)
    if not changes:
        return outcome
    return dataclasses.replace(outcome, **changes)
