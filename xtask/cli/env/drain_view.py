"""Rendering a drain run as plain lines: off a terminal, with ``NO_COLOR``, and as the
progress stream of ``--output json``. Every line goes through :func:`printable` (names and
errors are data). The live rich view is :mod:`xtask.cli.env.drain_live`,
imported only on a terminal (rich costs start-up time a runbook should not pay).
"""

from __future__ import annotations

from typing import TextIO

from xtask.cli.output import printable
from xtask.drain.core.states import WriteOutcome
from xtask.drain.report import Report


class PlainReporter:
    """One line per event; used when not on a terminal, with NO_COLOR, or with --output json (to stderr)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def line(self, text: str) -> None:
        print(printable(text), file=self.stream, flush=True)

    def close(self) -> None:
        """Nothing to tear down for plain lines (the live view stops its progress display)."""

    def event(self, kind: str, provider: str, details: dict) -> None:
        if kind == "plan":
            state = "already in requested state" if details["alreadyInState"] else "will change"
            after = str(details.get("drainAfter", details["requested"])).lower()
            held = f"; held by {', '.join(details['holders'])}" if details.get("holders") else ""
            self.line(f"  plan {provider}: drain {str(details['current']).lower()} -> {after} ({state}){held}")
        elif kind == "dry-run" and details["outcome"] != WriteOutcome.DRY_RUN_OK:
            self.line(f"  dry-run {provider}: REJECTED: {details.get('error')}")
        elif kind == "write-finished":
            extra = details.get("error") or details.get("note") or ""
            self.line(f"  write {provider}: {details['outcome']}{': ' + extra if extra else ''}")
        elif kind == "restored":
            self.line(
                f"  restore {provider}: {details['outcome']}{': ' + details['error'] if details.get('error') else ''}"
            )
        elif kind == "observation":
            lag = "; ".join(details["lagging"]) or "all targets agree"
            self.line(f"  observed ({details['state']}): {lag}")
        elif kind == "api-server":
            self.line(f"  {api_server_line(details)}")
        elif kind == "idle":  # a provider's idle state or reading changed (``idle-tick`` is for the live view)
            self.line(f"  idle-wait {idle_line(details)}")
        elif kind in ("wave", "soak", "gate"):
            self.line(f"  {wave_line(kind, details)}")


def wave_line(kind: str, details: dict) -> str:
    """A drain in waves: a wave's progress, a soak's progress, or a gate's reading."""
    if kind == "soak":
        return f"wave {details['wave']}: soaked {details['elapsed']:g}s of {details['seconds']:g}s"
    if kind == "gate":
        value = "none" if details["value"] is None else f"{details['value']:g}"
        verdict = "held" if details["held"] else "NOT HELD"
        return f"wave {details['wave']}: gate {details['gate']} {verdict}: {value} ({details['threshold']}); {details['detail']}"
    return f"wave {details['wave']} of {details['of']}: {details['state']}"


def api_server_line(details: dict) -> str:
    """The waiter's notice that every watch has been failing (or works again)."""
    if details["reachable"]:
        return "the API server answers again"
    return f"the API server has not answered for {details['seconds']:.0f}s ({details['error']}); still waiting"


def idle_line(p: dict) -> str:
    """``p-one: busy (running 0, waiting 3; read 1.2s ago)``, from one provider of the idle report."""
    age = f"; read {p['ageSeconds']:.1f}s ago" if p.get("ageSeconds") is not None else ""
    return f"{p['provider']}: {p['state']} ({p['detail']}{age})"


def plain_final(report: Report, stream: TextIO) -> None:
    def say(text: str) -> None:
        print(printable(text), file=stream)

    for r in report.refused:
        say(f"  refused: {r}")
    if report.convergence:
        for c in report.convergence.get("consumers", []):
            say(
                f"  consumer {c['consumer']}: overlay revision {c['overlayRevision']}, accepted {c['acceptedRevision']}, "
                f"serving {c['servingRevision']}"
            )
        for p in report.convergence.get("providers", []):
            extra = f" ({p['detail']})" if p.get("detail") else ""
            say(f"  {p['consumer']}/{p['provider']}: {p['state']}{extra}")
    if report.idle:
        for p in report.idle.get("providers", []):
            say(f"  idle {idle_line(p)}")
    for w in report.waves or []:
        earlier = " (by the run resumed)" if w.get("earlier") else ""
        gates = "; ".join(
            f"{g['gate']} {'held' if g['held'] else 'NOT HELD'} {g['value']} ({g['threshold']})" for g in w["gates"]
        )
        say(f"  wave {w['wave']}: {w['state']}{earlier}: {', '.join(w['providers'])}{'; ' + gates if gates else ''}")
