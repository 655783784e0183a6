"""Entry point: ``python -m xtask``. The one place that maps errors to exit codes.

Lower layers raise :class:`xtask.errors.XtaskError` (or a Kubernetes-boundary error); this
module prints the message once — with a traceback only under ``-v`` — and exits with the
documented code.
"""

from __future__ import annotations

import os
import signal
import sys

# SIGTERM and SIGHUP (a dropped terminal) end a command as SIGINT does: as an interrupted run,
# exit 8. A command that has cleanup to do handles them itself (a drain's SignalLatch, env up's
# xtask.interrupts); before and after those, they raise KeyboardInterrupt like SIGINT. One the
# process was started ignoring (nohup) stays ignored.
HANGUPS = (signal.SIGTERM, signal.SIGHUP)


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """SIGINT, SIGTERM or SIGHUP before the CLI has started (its modules still loading): nothing
    has been read or written yet, so end as an interrupted run (exit 8) rather than with a
    traceback or death by the signal."""
    os.write(2, b"interrupted\n")
    os._exit(8)  # ExitCode.INTERRUPTED; xtask.errors may not be loaded yet


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


signal.signal(signal.SIGINT, _interrupted_while_starting)
for _sig in HANGUPS:
    if signal.getsignal(_sig) is not signal.SIG_IGN:
        signal.signal(_sig, _interrupted_while_starting)

import io  # noqa: E402
import traceback  # noqa: E402
from typing import NoReturn  # noqa: E402

import click  # noqa: E402

from agn.kubeerrors import KubeError  # noqa: E402  (not agn.kube: a usage error never loads the client's boundary)
from xtask.cli.output import printable_lines  # noqa: E402
from xtask.errors import CommandFailed, ComponentFailed, ExitCode, XtaskError  # noqa: E402

# Loaded: from here on a SIGINT, SIGTERM or SIGHUP is a KeyboardInterrupt, which main() and the
# commands handle.
signal.signal(signal.SIGINT, signal.default_int_handler)
for _sig in HANGUPS:
    if signal.getsignal(_sig) is not signal.SIG_IGN:
        signal.signal(_sig, _interrupt)

# Shell completion is keyed by the console script's name, however the CLI was started:
# eval "$(_XTASK_COMPLETE=bash_source xtask)".
COMPLETE_VAR = "_XTASK_COMPLETE"


def prog_name() -> str:
    """``xtask`` when run as the console script, ``python -m xtask`` otherwise (usage lines)."""
    return "xtask" if os.path.basename(sys.argv[0]) == "xtask" else "python -m xtask"


def main(argv: list[str] | None = None, *, command: click.Command | None = None, prog: str | None = None) -> int:
    """Run ``command`` (default: the whole ``xtask`` tree) on ``argv`` as ``prog`` (usage lines).

    The command tree is loaded inside the ``try``: loading it takes a second or more on a busy
    machine, and a signal then (a KeyboardInterrupt, nothing read or written yet) must end the
    run as interrupted, not escape as a traceback and death by SIGINT (-2)."""
    args = sys.argv[1:] if argv is None else argv
    verbose = "-v" in args or "--verbose" in args
    try:
        _library_logging(verbose)
        if command is None:
            from xtask.cli import cli

            command = cli
        # Without standalone mode click returns (not raises) the code of a ctx.exit()/Exit.
        code = command.main(args=args, prog_name=prog or prog_name(), complete_var=COMPLETE_VAR, standalone_mode=False)
        return code if isinstance(code, int) else ExitCode.OK
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        # click quotes values without escaping them: its whole message is escaped on the way out.
        shown = io.StringIO()
        exc.show(file=shown)
        sys.stderr.write(printable_lines(shown.getvalue()))
        return ExitCode.USAGE
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except XtaskError as exc:
        _report(exc, verbose=verbose)
        return exc.exit_code
    except KubeError as exc:
        _report(exc, verbose=verbose)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout went away (`... | head -1`): the work is done, its report could
        # not be delivered. Quiet, like other command-line tools, and not a success.
        _silence_stdout()
        return ExitCode.ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _library_logging(verbose: bool) -> None:
    """Libraries' log records (urllib3's "Retrying ...", "Connection pool is full ...") are not
    printed unless ``-v``: xtask reports failures itself, once, in words. They would come from the
    background watch threads, and a daemon thread writing to stderr while the interpreter shuts
    down makes CPython abort the process (SIGABRT) after a run that had succeeded."""
    import logging

    root = logging.getLogger()
    if verbose:
        logging.basicConfig(level=logging.WARNING, format="%(threadName)s %(name)s: %(message)s")
    elif not root.handlers:
        root.addHandler(logging.NullHandler())  # a handler in place: logging's last-resort stderr writer stays unused


def _report(exc: Exception, *, verbose: bool) -> None:
    """The error once, on stderr. Messages quote input (names, paths, server answers, log
    lines): every control character in them is shown escaped, line breaks aside."""
    if verbose:
        traceback.print_exception(exc)
    print(f"error: {printable_lines(str(exc))}", file=sys.stderr)
    if isinstance(exc, ComponentFailed) and exc.log_tail:
        print("--- last lines of its log ---", file=sys.stderr)
        print(printable_lines(exc.log_tail), file=sys.stderr)
    if isinstance(exc, CommandFailed) and exc.output:
        print(printable_lines(exc.output), file=sys.stderr)
    hint = getattr(exc, "hint", None)
    if hint:
        print(f"hint: {printable_lines(str(hint))}", file=sys.stderr)


def finish(code: int) -> NoReturn:
    """Exit with ``code``, also when background threads are still running.

    The waiters' watch threads are daemons blocked in socket reads (up to a watch's timeout)
    and cannot be interrupted. Finalizing the interpreter under them can abort the process
    (SIGABRT, exit -6) after a run that succeeded: a daemon thread that wakes up writing to a
    standard stream or inside the TLS library while the runtime is being torn down. So when any
    other thread is alive, the streams and log handlers are flushed and the process ends without
    finalization; else it exits normally.

    The outcome is decided: a signal arriving now (a second Ctrl-C, SIGTERM or SIGHUP while an
    interrupted run tears down) is ignored, or it would replace ``code`` with death by that
    signal (-2 for SIGINT, through an uncaught ``KeyboardInterrupt``).
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    import logging
    import threading

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: nothing more can be said
    if any(t is not threading.current_thread() and t.is_alive() for t in threading.enumerate()):
        os._exit(code)
    sys.exit(code)


def run() -> NoReturn:
    """The console script and ``python -m xtask``. A signal between main()'s return and
    finish() (the few instructions where neither handles it) still ends the run as interrupted."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    finish(code)


if __name__ == "__main__":
    run()
