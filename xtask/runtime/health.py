"""Reading a component's ``/healthz`` (operator, consumer gateway) the way ``env up`` and
``env status`` need it: is it healthy, and if not, why — in particular whether it has lost its
API server (watches failing past their bound, or connected to an address the env no longer
uses); and :func:`http_ok`, the one "does it answer 200" probe. Loopback HTTP only; nothing here starts or stops anything.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ComponentReport(Record):
    answered: bool
    status: int
    body: dict[str, Any]

    @property
    def detail(self) -> str:
        return str(self.body.get("status") or self.body.get("detail") or "")


def http_ok(url: str, *, timeout: float = 2.0, context: ssl.SSLContext | None = None) -> bool:
    """Whether ``url`` answers 200 within ``timeout`` (``context``: the TLS client settings)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def read_health(url: str, *, timeout: float = 2.0) -> ComponentReport:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return ComponentReport(True, resp.status, _parse(resp.read()))
    except urllib.error.HTTPError as exc:
        return ComponentReport(True, exc.code, _parse(exc.read()))
    except (urllib.error.URLError, OSError):
        return ComponentReport(False, 0, {})


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        return {"detail": raw.decode(errors="replace").strip()}
    return body if isinstance(body, dict) else {"detail": str(body)}


def lost_api_server(report: ComponentReport, *, server: str | None) -> str | None:
    """Why a component that answers has lost its API server, or None."""
    if report.status == 503 and any(not w.get("live", True) for w in (report.body.get("watches") or {}).values()):
        return "its watches keep failing: " + "; ".join(
            f"{name}: {w.get('lastError', '')}"
            for name, w in sorted(report.body["watches"].items())
            if not w.get("live")
        )
    used = report.body.get("server")
    if server and used and used.rstrip("/") != server.rstrip("/"):
        return f"it uses API server {used}, the environment's is {server}"
    return None


def component_problem(url: str, *, server: str | None) -> str | None:
    """Why a running component must be restarted by ``env up`` (None: keep it)."""
    report = read_health(url)
    if not report.answered:
        return None  # starting up or hung: the start step's own readiness wait decides
    return lost_api_server(report, server=server)


def component_health(url: str, *, server: str | None) -> tuple[bool, str]:
    """``env status``: healthy only if it answers 200, its watches are live, it uses the env's API
    server and (for a gateway) it serves the newest overlay it has seen."""
    report = read_health(url)
    if not report.answered:
        return False, "no answer on /healthz"
    lost = lost_api_server(report, server=server)
    if lost:
        return False, lost
    if report.status != 200:
        return False, report.detail or f"/healthz answered {report.status}"
    if report.body.get("servesLatest") is False:
        return False, (
            f"serves overlay revision {report.body.get('servingRevision')}, "
            f"newest seen is {report.body.get('latestRevision')}"
        )
    behind = probes_behind(report)
    return True, f"{report.detail}; {behind}" if behind and report.detail else (behind or report.detail)


def probes_behind(report: ComponentReport) -> str | None:
    """The operator's probe backlog in words while probes start later than their interval, else
    None. Healthy all the same: a restart would not probe faster, but load readings are ageing
    because of the operator, not because of the providers."""
    probes = report.body.get("probes")
    if not isinstance(probes, dict) or not probes.get("behind"):
        return None
    words = (
        f"probes behind: {probes.get('backlog')} due and waiting for one of "
        f"{probes.get('concurrency')} slots, the oldest {probes.get('lagSeconds')}s late"
    )
    asked, finished, fits = (
        probes.get("askedPerSecond"),
        probes.get("finishedPerSecond"),
        probes.get("fitsIntervalSeconds"),
    )
    if isinstance(asked, int | float) and isinstance(finished, int | float) and isinstance(fits, int | float):
        words += (
            f"; the networks ask {asked:g} probes/s and {finished:g}/s finish: a probe interval of {fits:g}s would fit"
        )
    return words
