"""``env up``'s steps on a terminal, as kind shows its own: a spinner with the step's elapsed
time while it runs, then ``✓ step (2.3s)`` or ``✗ step (0.4s)``; a skipped step is ``✓ step
(already done)``. On stderr, like every progress line (stdout keeps the result). Off a terminal
``env up`` prints the plain lines of :class:`xtask.progress.StepReporter` instead, unchanged.

Imported only on a terminal. Titles and messages reach rich through :func:`markup_safe`: text,
never markup.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from xtask.cli.output import markup_safe as e
from xtask.cli.output import printable
from xtask.progress import StepReporter

REFRESH_PER_SECOND = 8


class LiveSteps(StepReporter):
    """A spinner per running step (its title and elapsed seconds), a ✓/✗ line when it ends."""

    def __init__(self, console: Console) -> None:
        super().__init__(lambda message: None)
        self.console = console
        self.live: Live | None = None
        self.spinner: Spinner | None = None
        self.title = ""
        self.began = 0.0

    def __call__(self, message: str) -> None:
        self.console.print(f"[cyan]•[/cyan] {e(message)}")  # above the spinner while one runs

    def skipped(self, title: str) -> None:
        self.console.print(f"[green]✓[/green] {e(title)} [dim](already done)[/dim]")

    def started(self, title: str) -> None:
        self._stop()
        self.title, self.began = title, time.monotonic()
        self.spinner = Spinner("dots", text=self._text(), style="cyan")
        self.live = Live(
            console=self.console,
            get_renderable=self._render,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,  # the spinner's line is replaced by the ✓/✗ line
        )
        self.live.start()

    def finished(self, title: str, seconds: float) -> None:
        self._stop()
        self.console.print(f"[green]✓[/green] {e(title)} [dim]({seconds:.1f}s)[/dim]")

    def failed(self, title: str, seconds: float) -> None:
        self._stop()
        self.console.print(f"[red]✗[/red] {e(title)} [dim]({seconds:.1f}s)[/dim]")

    def close(self) -> None:
        self._stop()

    def _text(self) -> Text:
        return Text.assemble(printable(self.title), (f" ({time.monotonic() - self.began:.0f}s)", "dim"))

    def _render(self) -> Spinner:
        assert self.spinner is not None
        self.spinner.update(text=self._text())
        return self.spinner

    def _stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
