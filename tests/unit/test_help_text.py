"""``--help`` of every env command: examples that parse, exit codes from xtask/errors.py, and
provider-drain's flags in a few named groups.

The examples of provider-drain are also run, as shown, against the example env's objects on a
real API server: tests/integration/test_help_examples.py.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from helpexamples import section, shown_examples
from xtask.cli import cli
from xtask.cli.env import COMMANDS, env_group
from xtask.cli.helptext import Example, example_lines
from xtask.errors import EXIT_CODE_MEANINGS, ExitCode

MAX_GROUPS = 7


def help_of(*args: str, width: int = 100) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="xtask", terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


def command(name: str) -> click.Command:
    found = env_group.get_command(click.Context(env_group), name)
    assert found is not None
    return found


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_shows_examples_that_its_parser_accepts(name, tmp_path, monkeypatch):
    examples = shown_examples(help_of("env", name))
    assert examples, f"env {name} --help shows no example"
    monkeypatch.setenv("HOME", str(tmp_path))
    for argv in examples:
        assert argv[:3] == ["xtask", "env", name], argv
        for arg in argv:  # a file under ~ (a journal): the shell expands it; here it exists
            if arg.startswith("~/"):
                argv[argv.index(arg)] = os.path.expanduser(arg)
                Path(os.path.expanduser(arg)).parent.mkdir(parents=True, exist_ok=True)
                Path(os.path.expanduser(arg)).touch()
        # Parsed as the command would parse it (types, choices, conflicts), without running it.
        with command(name).make_context(name, argv[3:]) as ctx:
            assert ctx.params is not None


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_lists_its_exit_codes_with_the_documented_meanings(name):
    rows = section(help_of("env", name), "Exit codes")
    codes = [re.match(r"^  (\d+)  (.+)$", row) for row in rows if row.strip()]
    assert codes and all(codes), rows
    listed = {ExitCode(int(m.group(1))): m.group(2) for m in codes if m}
    assert ExitCode.OK in listed and ExitCode.USAGE in listed
    for code, meaning in listed.items():
        # A command may word "done" (and what an interruption leaves) for itself; every other
        # code is the README's table, word for word.
        if code not in (ExitCode.OK, ExitCode.INTERRUPTED):
            assert meaning == EXIT_CODE_MEANINGS[code], (name, code)


def test_the_env_group_lists_every_exit_code():
    text = help_of("env")
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"  {int(code)}  {meaning}" in text


def test_provider_drain_groups_its_flags_in_a_few_named_groups():
    text = help_of("env", "provider-drain")
    headings = [line[:-1] for line in text.splitlines() if re.match(r"^[A-Z][^:]*:$", line)]
    groups = [h for h in headings if h not in ("Examples", "Exit codes")]
    assert groups == [
        "Cluster and selection",
        "Targets and waiting",
        "Safety and plans",
        "Waves",
        "Holds",
        "Writes and journal",
        "Output",
    ]
    assert len(groups) <= MAX_GROUPS
    assert "Other options" not in text and "\nOptions:" not in text
    # Every visible flag is shown, in exactly one group.
    flags = [opt for p in command("provider-drain").params if not getattr(p, "hidden", False) for opt in p.opts]
    for flag in flags:
        assert len(re.findall(rf"^  (?:-\w, )?{re.escape(flag)}(?=[ ,\n])", text, flags=re.M)) == 1, flag
    assert len(shown_examples(text)) >= 3


def test_examples_use_the_invoking_command_path():
    argv = shown_examples(help_of("env", "provider-drain"))[0]
    assert argv[:3] == ["xtask", "env", "provider-drain"]
    from xtask.cli.kubectl_plugin import plugin_group

    result = CliRunner().invoke(plugin_group, ["drains", "--help"], prog_name="kubectl agn")
    assert "  kubectl agn drains --context local-example" in result.output


def test_a_long_example_is_continued_between_arguments_and_reads_back_whole():
    example = Example(
        "Drain it, saying why in words that need quoting.",
        "--context local-example --provider provider-one --reason 'kernel upgrade; $HOME' --network production "
        "--consumer consumer-a --consumer consumer-b ~/x",
    )
    lines = example_lines("xtask env provider-drain", example, width=60)
    assert all(len(line) <= 60 for line in lines)
    assert lines[0] == "  # Drain it, saying why in words that need quoting."
    command_lines = [line.strip().removesuffix("\\") for line in lines[1:]]
    assert shlex.split(" ".join(command_lines)) == ["xtask", "env", "provider-drain", *shlex.split(example.args)]
    assert "--reason 'kernel upgrade; $HOME'" in " ".join(command_lines)  # a flag stays with its value
    assert command_lines[-1].endswith(" ~/x")  # not quoted: the shell expands it
