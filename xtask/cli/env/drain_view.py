"""Rendering a drain run as plain lines: its progress (on stderr, always) when stderr is not a
terminal, with ``NO_COLOR`` or with ``--output json|yaml|name``, and its result (on stdout) when
stdout is not a terminal. Every line goes through :func:`printable` (names and
errors are data). The live rich view is :mod:`xtask.cli.env.drain_live`,
imported only on a terminal (rich costs start-up time a runbook should not pay).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from xtask.cli.output import printable
from xtask.drain.core.progress import (
    ApiServerNotice,
    DryRunChecked,
    Observed,
    Planned,
    Said,
    WaitBegun,
    WriteFinished,
    WriteStarted,
)
from xtask.drain.core.states import WriteOutcome
from xtask.drain.report import Report
from xtask.drain.signals import stream_lost

if TYPE_CHECKING:
    from xtask.drain.core.progress import ProgressEvent
    from xtask.drain.core.progress_phases import GateRead, Soaking, WaveChanged


class PlainReporter:
    """One line per progress event, on stderr; used when stderr is not a terminal, with
    NO_COLOR, or with an --output other than the table."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lost = False  # the stream could not be written: nothing more is tried

    def line(self, text: str) -> None:
        if self.lost:
            return
        try:
            print(printable(text), file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed terminal or pipe (EIO, EPIPE), or a closed file
            self.lost = True
            stream_lost()  # interrupts the run as SIGHUP does: restored during writes, kept after

    def close(self) -> None:
        """Nothing to tear down for plain lines (the live view stops its progress display)."""

    def __call__(self, event: ProgressEvent) -> None:
        text = plain_line(event)
        if text is not None:
            self.line(text)


def plain_line(event: ProgressEvent) -> str | None:
    """The line a progress event is shown as, or None for one only a live view shows."""
    match event:
        case Said(text) | WaitBegun(text):
            return text
        case Planned():
            return plan_line(event.to_dict())
        case DryRunChecked(outcome) if outcome.outcome != WriteOutcome.DRY_RUN_OK:
            return f"  dry-run {outcome.provider}: REJECTED: {outcome.error}"
        case WriteFinished(outcome):
            extra = outcome.error or outcome.note or ""
            return f"  write {outcome.provider}: {outcome.outcome}{': ' + extra if extra else ''}"
        case Observed(state, lagging):
            return f"  observed ({state}): {'; '.join(lagging) or 'all targets agree'}"
        case ApiServerNotice():
            return f"  {api_server_line(event)}"
        case DryRunChecked() | WriteStarted():  # an accepted dry run, a write begun: the live view's
            return None
    return phase_line(event)


def phase_line(event: ProgressEvent) -> str | None:
    """The line of an event of a phase a single drain does not run (xtask/drain/core/progress_phases.py,
    loaded here only when one comes), or None for one only a live view shows."""
    from xtask.drain.core.progress_phases import (
        GateRead,
        IdleChanged,
        LockWaiting,
        RestoreFinished,
        Soaking,
        WaveChanged,
    )

    match event:
        case LockWaiting():
            return event.text
        case RestoreFinished(r):
            return f"  restore {r.provider}: {r.outcome}{': ' + r.error if r.error else ''}"
        case IdleChanged(provider):  # a provider's idle state or reading changed (IdleTick: the live view's)
            return f"  idle-wait {idle_line(provider)}"
        case WaveChanged() | Soaking() | GateRead():
            return f"  {wave_line(event)}"
    return None


def plan_line(p: dict) -> str:
    """``  plan p-one: drain false -> true (will change)``, from one entry of the report's ``plan``."""
    state = "already in requested state" if p["alreadyInState"] else "will change"
    held = f"; held by {', '.join(p['holders'])}" if p.get("holders") else ""
    note = f"; {p['note']}" if p.get("note") else ""  # a re-run's update of its hold, or none needed
    after = p.get("drainAfter", p["requested"])  # drainAfter: what holds leave; older reports had only requested
    return f"  plan {p['provider']}: drain {str(p['current']).lower()} -> {str(after).lower()} ({state}){held}{note}"


def selection_line(report: Report) -> str:
    """The selection, as the run said it when it made it."""
    return f"selection ({report.selector}, namespace {report.namespace}): {', '.join(report.selection)}"


def pacing_line(report: Report) -> str | None:
    """``plan pacing: --soak 2 --on-breach hold ...``: what a plan written or applied fixes of how
    the run goes (None: no plan), and what a plan made before plans recorded it does not."""
    plan = report.plan_file or {}
    if "pacing" not in plan:
        return None
    from xtask.drain.core.plandoc import pacing_arguments  # only a plan's pacing is shown

    flags = " ".join(pacing_arguments(plan["pacing"])) or "(defaults)"
    missing = plan.get("notRecorded") or []
    return f"plan pacing: {flags}" + (f" (not recorded by the plan, defaults: {', '.join(missing)})" if missing else "")


def shows_plan(report: Report) -> bool:
    """Whether the plan is the result (a dry run, or --plan-out), not only the run's progress."""
    return report.dry_run or (report.plan_file or {}).get("action") == "written"


def wave_line(event: WaveChanged | Soaking | GateRead) -> str:
    """A drain in waves: a wave's progress, a soak's progress, or a gate's reading."""
    from xtask.drain.core.progress_phases import GateRead, Soaking

    if isinstance(event, Soaking):
        return f"wave {event.wave}: soaked {event.elapsed:g}s of {event.seconds:g}s"
    if isinstance(event, GateRead):
        r = event.reading
        value = "none" if r["value"] is None else f"{r['value']:g}"
        verdict = "held" if r["held"] else "NOT HELD"
        return f"wave {event.wave}: gate {r['gate']} {verdict}: {value} ({r['threshold']}); {r['detail']}"
    return f"wave {event.wave} of {event.of}: {event.state}"


def api_server_line(event: ApiServerNotice) -> str:
    """The waiter's notice that every watch has been failing (or works again)."""
    if event.reachable:
        return "the API server answers again"
    return f"the API server has not answered for {event.seconds:.0f}s ({event.error}); still waiting"


def idle_line(p: dict) -> str:
    """``p-one: busy (running 0, waiting 3; read 1.2s ago)``, from one provider of the idle report."""
    age = f"; read {p['ageSeconds']:.1f}s ago" if p.get("ageSeconds") is not None else ""
    return f"{p['provider']}: {p['state']} ({p['detail']}{age})"


def plain_final(report: Report, stream: TextIO) -> None:
    """The result of a run as plain lines (stdout, off a terminal): the selection, the plan of a
    dry run, what was refused, written, restored, still held, served and idle, and the waves.
    The run's progress went to stderr; this is what it came to."""

    def say(text: str) -> None:
        print(printable(text), file=stream)

    if report.selection:
        say(selection_line(report))
    if shows_plan(report):
        for p in report.plan:
            say(plan_line(p))
    if (pacing := pacing_line(report)) is not None:
        say(pacing)
    for r in report.refused:
        say(f"  refused: {r}")
    if any(o["outcome"] != WriteOutcome.UNCHANGED for o in report.outcomes):
        for o in report.outcomes:
            extra = o.get("error") or o.get("note") or ""
            say(f"  write {o['provider']}: {o['outcome']}{': ' + extra if extra else ''}")
    for back in report.restorations:
        say(f"  restore {back['provider']}: {back['outcome']}{': ' + back['error'] if back.get('error') else ''}")
    for name, holders in report.still_held.items():
        say(f"  {name} stays drained: still held by {', '.join(holders)}")
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
