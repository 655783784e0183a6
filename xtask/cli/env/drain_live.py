"""The live rich view of a drain run on a terminal: a progress bar for the writes and a spinner
for the wait (on stderr, a terminal), and final tables (on stdout, a terminal). Imported only
on a terminal. Values (names,
errors, states) reach rich only through :func:`markup_safe` (``e``): text, never markup."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from xtask.cli.env.drain_view import (
    PlainReporter,
    api_server_line,
    idle_line,
    pacing_line,
    plain_line,
    selection_line,
    shows_plan,
    wave_line,
)
from xtask.cli.output import markup_safe as e
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
from xtask.drain.core.progress_phases import GateRead, IdleTick, LockWaiting, RestoreFinished, Soaking, WaveChanged
from xtask.drain.core.states import Outcome, WriteOutcome
from xtask.drain.report import Report
from xtask.drain.signals import stream_lost

if TYPE_CHECKING:
    from xtask.drain.core.progress import ProgressEvent


class RichReporter(PlainReporter):
    """Live view: a progress bar for writes (done / in flight / failed), a spinner for the wait."""

    def __init__(self, console: Console) -> None:
        super().__init__(sys.stderr)  # progress, never the result: stderr
        self.console = console
        self.progress: Progress | None = None
        self.task: Any = None  # the rich TaskID of the current bar or spinner
        self.in_flight = 0
        self.failed = 0
        self.total = 0
        self.planned = 0

    def line(self, text: str) -> None:
        self(Said(text))

    def _spinner(self, text: str) -> None:
        """A wait begins: a spinner with the elapsed time, its text updated as the wait goes."""
        self._stop_progress()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task(e(text), total=None)

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def _describe(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=e(text))

    def __call__(self, event: ProgressEvent) -> None:
        if self.lost:
            return
        try:
            self._show(event)
        except (OSError, ValueError):  # the terminal went away (EIO, EPIPE)
            self.lost = True
            stream_lost()  # interrupts the run as SIGHUP does

    def _show(self, event: ProgressEvent) -> None:
        match event:
            case WaitBegun(text):
                self._spinner(text)
            case LockWaiting():
                if self.progress is None:
                    self._spinner(event.text)
                self._describe(event.text)
            case Planned():
                self._planned(event)
            case WriteStarted():
                self._write_started()
            case WriteFinished(outcome):
                self._write_finished(outcome)
            case Observed(state, lagging):
                lag = "; ".join(lagging) or "all targets agree (confirmed by a second, fresh observation)"
                self._describe(f"{state}: {lag}"[:150])
            case ApiServerNotice():
                self.console.print(("[green]" if event.reachable else "[yellow]") + e(api_server_line(event)) + "[/]")
            case IdleTick(providers):
                # Every provider's last reading and its age, refreshed about once a second.
                self._describe("; ".join(idle_line(p) for p in providers)[:200])
            case DryRunChecked() | RestoreFinished():
                self._stop_progress()
                shown = plain_line(event)
                if shown is not None:
                    self.console.print(e(shown))
            case Soaking():
                self._describe(wave_line(event))
            case WaveChanged() | GateRead():
                self.console.print(e(wave_line(event)))
            case Said(text):
                self._stop_progress()
                self.console.print(e(text))

    def _planned(self, event: Planned) -> None:
        self.planned += 0 if event.already else 1
        mark = "[dim]already in requested state[/dim]" if event.already else "[yellow]will change[/yellow]"
        self.console.print(
            f"  {e(event.provider)}: drain {str(event.current).lower()} -> {str(event.drain_after).lower()}  {mark}"
            + (f"  held by {e(', '.join(event.holders))}" if event.holders else "")
            + (f"  {e(event.note)}" if event.note else "")
        )

    def _write_started(self) -> None:
        if self.progress is None:
            self.progress = Progress(
                TextColumn("writes"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task("writes", total=self.planned or None, detail="")
        self.in_flight += 1
        self._update()

    def _write_finished(self, outcome: Outcome) -> None:
        self.in_flight -= 1
        if outcome.outcome == WriteOutcome.FAILED:
            self.failed += 1
            self.console.print(f"  [red]{e(outcome.provider)}: failed[/red]: {e(outcome.error)}")
        if self.progress is not None:
            self.progress.advance(self.task)
        self._update()

    def _update(self) -> None:
        if self.progress is not None:
            self.progress.update(self.task, detail=f"in flight {self.in_flight}  failed {self.failed}")

    def close(self) -> None:
        self._stop_progress()


def render_final(report: Report, console: Console) -> None:
    """The result of a run as tables: what :func:`~xtask.cli.env.drain_view.plain_final` says in lines."""
    _render_decided(report, console)
    _render_written(report, console)
    _render_observed(report, console)


def _render_decided(report: Report, console: Console) -> None:
    """What the run decided before writing: the selection, a dry run's plan, what it refused."""
    if report.selection:
        console.print(e(selection_line(report)))
    if shows_plan(report) and report.plan:
        table = Table(title="plan", title_justify="left")
        for col in ("provider", "drain", "change", "held by"):
            table.add_column(col)
        for p in report.plan:
            change = "already in requested state" if p["alreadyInState"] else "will change"
            drain = f"{str(p['current']).lower()} -> {str(p.get('drainAfter', p['requested'])).lower()}"
            table.add_row(e(p["provider"]), drain, change, e(", ".join(p.get("holders") or [])))
        console.print(table)
    if (pacing := pacing_line(report)) is not None:
        console.print(e(pacing))
    for r in report.refused:
        console.print(f"[red]refused:[/red] {e(r)}")


def _render_written(report: Report, console: Console) -> None:
    """What the run wrote and restored, and which providers other holders keep drained."""
    if report.outcomes and any(o["outcome"] != WriteOutcome.UNCHANGED for o in report.outcomes):
        table = Table(title="outcomes", title_justify="left")
        for col in ("provider", "outcome", "detail"):
            table.add_column(col)
        for o in report.outcomes:
            table.add_row(e(o["provider"]), e(o["outcome"]), e(o.get("error") or o.get("note") or ""))
        console.print(table)
    if report.restorations:
        table = Table(title="restorations", title_justify="left")
        for col in ("provider", "outcome", "detail"):
            table.add_column(col)
        for back in report.restorations:
            table.add_row(e(back["provider"]), e(back["outcome"]), e(back.get("error") or ""))
        console.print(table)
    for name, holders in report.still_held.items():
        console.print(f"[yellow]{e(name)} stays drained[/yellow]: still held by {e(', '.join(holders))}")


def _render_observed(report: Report, console: Console) -> None:
    """What the run saw after writing: the consumers' revisions, the waves, the idle readings."""
    if report.convergence and report.convergence.get("consumers"):
        states: dict[tuple[str, str], str] = {}
        for p in report.convergence.get("providers", []):
            states[(p["consumer"], p["provider"])] = p["state"] + (f" ({p['detail']})" if p.get("detail") else "")
        table = Table(title="consumers", title_justify="left")
        for col in ("consumer", "overlay", "accepted", "serving", *report.selection):
            table.add_column(e(col))
        for c in report.convergence["consumers"]:
            table.add_row(
                e(c["consumer"]),
                e(c["overlayRevision"]),
                e(c["acceptedRevision"]),
                e(c["servingRevision"]),
                *(e(states.get((c["consumer"], name), "-")) for name in report.selection),
            )
        console.print(table)
    if report.waves:
        table = Table(title="waves", title_justify="left")
        for col in ("wave", "state", "providers", "gates"):
            table.add_column(col)
        for w in report.waves:
            gates = "; ".join(
                f"{g['gate']} {'held' if g['held'] else 'NOT HELD'} {g['value']} ({g['threshold']})" for g in w["gates"]
            )
            state = w["state"] + (" (earlier run)" if w.get("earlier") else "")
            table.add_row(e(w["wave"]), e(state), e(", ".join(w["providers"])), e(gates))
        console.print(table)
    if report.idle and report.idle.get("providers"):
        table = Table(title=f"idle ({e(report.idle['state'])})", title_justify="left")
        for col in ("provider", "state", "running", "waiting", "read", "detail"):
            table.add_column(col)
        for p in report.idle["providers"]:
            reading = p.get("lastReading") or {}
            table.add_row(
                e(p["provider"]),
                e(p["state"]),
                e(reading.get("running", "-")),
                e(reading.get("waiting", "-")),
                f"{p['ageSeconds']:.1f}s ago" if p.get("ageSeconds") is not None else "-",
                e(p["detail"]),
            )
        console.print(table)
