"""The words and report sections a drain run ends with: the one-line summaries of a wait, an
idle wait and a restoration, and the ``convergence`` and ``idle`` sections of the report.
Pure: results in, text and plain dicts out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xtask.drain.core.idle import not_idle
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.states import IdleWaitState, WaitState
from xtask.drain.edges.waiter import WaitResult

if TYPE_CHECKING:
    from xtask.drain.edges.idle_waiter import IdleResult


def convergence_dict(result: WaitResult) -> dict:
    """The report's ``convergence`` section: how the wait ended and where each consumer stands."""
    verdict = result.verdict
    out = {"state": result.state, "observations": result.observations, "seconds": round(result.seconds, 3)}
    if result.error:
        out["apiServerError"] = result.error
    if verdict is not None:
        out["lagging"] = list(verdict.lagging)
        out["notEligible"] = list(verdict.not_eligible)
        out["providers"] = [dataclasses.asdict(p) for p in verdict.providers]
        out["consumers"] = [
            {"consumer": s[0], "overlayRevision": s[1], "acceptedRevision": s[3], "servingRevision": s[4]}
            for s in verdict.signature
            # A consumer's entry starts with its name; the last entry is the providers' (name,
            # drain) pairs, five of them when five providers are selected: not a consumer.
            if isinstance(s, tuple) and len(s) == 5 and isinstance(s[0], str)
        ]
    return out


def wait_summary(result: WaitResult, req: DrainRequest) -> str:
    """The last line of a run that waited for convergence."""
    consumers = ", ".join(req.consumers)
    verdict = result.verdict
    if result.state is WaitState.CONVERGED:
        return f"converged: {consumers} serve the change (two agreeing observations, {result.seconds:.2f}s)"
    if result.state is WaitState.NOT_ELIGIBLE:
        assert verdict is not None  # not-eligible is a verdict two observations agreed on
        return not_eligible_summary(verdict.not_eligible)
    lag = "; ".join(verdict.lagging) if verdict and verdict.lagging else "no complete observation yet"
    if result.state is WaitState.TIMEOUT:
        down = f"; the API server is not answering ({result.error})" if result.error else ""
        return f"timed out after {req.timeout:.0f}s; lagging: {lag}{down}"
    if result.state is WaitState.UNREACHABLE:
        return (
            f"the API server stopped answering while waiting ({result.error}); the change is stored, "
            f"not confirmed serving; not yet confirmed: {lag}"
        )
    return f"interrupted while waiting; the applied state is kept; not yet confirmed: {lag}"


def not_eligible_summary(not_eligible: Sequence[str]) -> str:
    """The last line of an undrain stored and served whose providers a hard failure keeps out
    (every wave's, for an undrain in waves: the report's folded ``convergence.notEligible``)."""
    return "undrain stored and served, but not eligible: " + "; ".join(not_eligible)


def idle_dict(result: IdleResult, *, timeout: float, max_age: float) -> dict:
    """The report's ``idle`` section: how the wait for idle ended and each provider's last reading."""
    return {
        "state": result.state,
        "seconds": round(result.seconds, 3),
        "timeoutSeconds": timeout,
        "metricsMaxAgeSeconds": max_age,
        "providers": [p.to_dict() for p in result.providers],
        "notIdle": not_idle(result.providers),
    }


def idle_summary(result: IdleResult, req: DrainRequest, timeout: float) -> str:
    """The last line of a run that waited for idle."""
    consumers = ", ".join(req.consumers)
    if result.state is IdleWaitState.IDLE:
        names = ", ".join(p.reading.provider for p in result.providers)
        return f"drained, serving on {consumers}, and idle: {names} (two idle readings each, {result.seconds:.2f}s)"
    busy = "; ".join(not_idle(result.providers))
    if result.state is IdleWaitState.TIMEOUT:
        return f"drained and serving, not idle after {timeout:.0f}s: {busy}; the drain stays applied"
    return f"interrupted while waiting for idle; the drain is kept (serving on {consumers}); not idle yet: {busy}"


def restoration_summary(restorations: Sequence[Mapping[str, Any]]) -> str:
    """``p-a restored, p-b changed-by-another-writer``, or that nothing needed restoring."""
    if not restorations:
        return "nothing to restore"
    return ", ".join(f"{r['provider']} {r['outcome']}" for r in restorations)
