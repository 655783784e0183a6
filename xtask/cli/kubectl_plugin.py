"""``kubectl agn``: the ``env`` commands as a kubectl plugin (the ``kubectl-agn`` console script).

kubectl finds ``kubectl-agn`` on ``PATH`` and runs it with every argument after ``agn``,
unparsed. kubectl's own global flags reach the plugin that way, before or after the
subcommand: ``kubectl agn -n team drains``, ``kubectl agn drains -n team``. They are taken
out here and handed to the subcommand as its own flags:

* ``--context``, ``--kubeconfig``, ``-n``/``--namespace``: to a command that takes them
  (``provider-drain``, ``drains``; ``drain-restore`` takes ``--context``/``--kubeconfig``);
* ``--context local-NAME`` or ``kind-NAME`` to a command that takes ``--env`` instead
  (``status``, ``up``, ``down``, ``render``): ``--env NAME``, the env whose context it is;
* anything else is a usage error (exit 2) naming the flag and its value: a flag the command
  would not honour is never dropped in silence.
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import click

from xtask.cli.env import COMMANDS, LazyGroup
from xtask.errors import ExitCode, UsageError, exit_codes_epilog

PROG = "kubectl agn"
GLOBAL_FLAGS = {
    "--context": "--context",
    "--kubeconfig": "--kubeconfig",
    "--namespace": "--namespace",
    "-n": "--namespace",
}
ENV_CONTEXT_PREFIXES = ("local-", "kind-")  # the contexts `xtask env up` writes (docs/runtimes.md)


@click.group(
    name="agn",
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=exit_codes_epilog(),
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    expose_value=False,
    help="Show tracebacks and debug detail on errors (as xtask -v).",
)
def plugin_group() -> None:
    """AGN environment commands as a kubectl plugin (the same commands as `xtask env`).

    kubectl's --context, --kubeconfig and -n/--namespace are honoured before or after the
    command: `kubectl agn -n team drains`, `kubectl agn provider-drain --context kind-example ...`.
    For commands that take --env (status, up, down, render), --context local-NAME or kind-NAME
    selects the env NAME.
    """


def split_globals(args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """kubectl's global flags in ``args`` (``--flag value``, ``--flag=value``, ``-nNS``, ``-n=NS``)
    as (long flag, value) pairs in order, and the other arguments. ``--`` ends the flags."""
    found: list[tuple[str, str]] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name, eq, value = arg.partition("=")
        if name in GLOBAL_FLAGS and eq:
            found.append((GLOBAL_FLAGS[name], value))
        elif arg in GLOBAL_FLAGS:
            if i + 1 >= len(args):
                raise UsageError(f"{arg} needs a value")
            found.append((GLOBAL_FLAGS[arg], args[i + 1]))
            i += 1
        elif arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2:
            found.append(("--namespace", arg[2:]))
        else:
            rest.append(arg)
        i += 1
    return found, rest


def env_of_context(context: str) -> str | None:
    """``NAME`` of a context ``local-NAME`` / ``kind-NAME``, else None."""
    for prefix in ENV_CONTEXT_PREFIXES:
        if context.startswith(prefix) and len(context) > len(prefix):
            return context[len(prefix) :]
    return None


def command_args(name: str, found: list[tuple[str, str]], rest: list[str]) -> list[str]:
    """The arguments for the env command ``name``: its own, then the global flags it takes."""
    module, attr = COMMANDS[name].split(":")
    command: click.Command = getattr(importlib.import_module(module), attr)
    opts = {opt for param in command.params for opt in param.opts}
    mapped: list[str] = []
    for flag, value in found:
        if flag in opts:
            mapped += [flag, value]
        elif flag == "--context" and "--env" in opts:
            env = env_of_context(value)
            if env is None:
                raise UsageError(
                    f"{PROG} {name} selects an env, not a context: --context {value!r} is not local-NAME or kind-NAME",
                    hint=f"pass --env NAME ({PROG} {name} --help)",
                )
            if "--env" not in rest and not any(a.startswith("--env=") for a in rest):
                mapped += ["--env", env]
        else:
            raise UsageError(f"{PROG} {name} does not take {flag} (given {value!r})", hint=f"see {PROG} {name} --help")
    return [name, *mapped, *rest]


def plugin_args(args: list[str]) -> list[str]:
    """``args`` as given by kubectl, rearranged for :data:`plugin_group`."""
    found, rest = split_globals(args)
    command = next((i for i, a in enumerate(rest) if not a.startswith("-")), None)
    if command is None or rest[command] not in COMMANDS:
        return rest  # help, or an unknown command: the group says which
    return [*rest[:command], *command_args(rest[command], found, rest[command + 1 :])]


def main(argv: list[str] | None = None) -> int:
    from xtask.__main__ import _report
    from xtask.__main__ import main as xtask_main

    args = sys.argv[1:] if argv is None else argv
    try:
        arranged = plugin_args(args)
    except UsageError as exc:
        _report(exc, verbose=False)
        return ExitCode.USAGE
    return xtask_main(arranged, command=plugin_group, prog=PROG)


def run() -> NoReturn:
    """The ``kubectl-agn`` console script."""
    from xtask.__main__ import finish

    finish(main())
