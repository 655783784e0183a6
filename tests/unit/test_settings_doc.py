"""Settings declared once (agn/flags.py): the parser, the command lines and docs/settings.md
all follow the settings dataclasses."""

from __future__ import annotations

import dataclasses

import pytest

from agn.flags import argv_for, build_parser, flag_name, markdown_table, parse
from agn.gateway.settings import GatewaySettings
from agn.operator.settings import Settings
from agn.provider.settings import ProviderSettings
from agn.settings_doc import PROGRAMS, render
from xtask.state import REPO_ROOT

DOC = REPO_ROOT / "docs" / "settings.md"
REQUIRED = {Settings: {"namespace": "ns"}, GatewaySettings: {"consumer": "c"}, ProviderSettings: {"name": "p"}}


def test_docs_settings_md_is_what_the_dataclasses_render():
    # As rust-analyzer's sourcegen checks: a stale page fails the test and is rewritten, to be committed.
    want = render()
    have = DOC.read_text() if DOC.exists() else ""
    if have != want:
        DOC.write_text(want)
        pytest.fail(f"{DOC.relative_to(REPO_ROOT)} was out of date and has been rewritten: commit it")


@pytest.mark.parametrize("cls", [cls for *_, cls in PROGRAMS], ids=lambda cls: cls.__name__)
def test_every_flag_of_the_parser_is_in_the_table_with_its_default(cls):
    table = markdown_table(cls).replace("--[no-]", "--")
    parser = build_parser(cls, prog="p", description=None)
    for action in parser._actions:
        if action.dest != "help":
            row = next(line for line in table.splitlines() if line.startswith(f"| `{action.option_strings[0]}"))
            shown = f"`{action.default}`"
            if action.default is None or isinstance(action.default, bool):
                shown = {None: "unset", True: "on", False: "off"}[action.default]
            assert row.split(" | ")[1] == ("required" if action.required else shown), row


@pytest.mark.parametrize("cls", [cls for *_, cls in PROGRAMS], ids=lambda cls: cls.__name__)
def test_the_command_line_defaults_are_the_dataclass_defaults(cls):
    parsed = parse(cls, [x for k, v in REQUIRED[cls].items() for x in (flag_name(k), v)], prog="p")
    assert parsed == cls(**REQUIRED[cls])


def test_argv_for_starts_the_program_with_exactly_those_values():
    values = {
        "kubeconfig": "/k",
        "namespace": "ns",
        "probe_jitter": 0.0,
        "overlay_shards": 4,
        "leader_elect": False,
        "health_port": 8080,
    }
    argv = argv_for(Settings, **values)
    assert argv == [
        *("--kubeconfig", "/k", "--namespace", "ns", "--probe-jitter", "0.0", "--overlay-shards", "4"),
        *("--no-leader-elect", "--health-port", "8080"),
    ]
    assert parse(Settings, argv, prog="p") == dataclasses.replace(Settings(), **values)
    assert argv_for(ProviderSettings, name="p", unhealthy=True, no_metrics=False) == ["--name", "p", "--unhealthy"]
    assert argv_for(GatewaySettings, consumer="c", namespace=None) == ["--consumer", "c"]


@pytest.mark.parametrize(
    "values, error, message",
    [
        ({"overlay_shard": 4}, TypeError, "Settings has no setting 'overlay_shard'"),
        ({"overlay_shards": 0}, ValueError, "--overlay-shards 0: shard count must be between 1 and 100"),
        ({"probe_interval": float("nan")}, ValueError, "--probe-interval nan: must be a finite number"),
        ({"log_level": "loud"}, ValueError, "--log-level loud: not one of debug, info, warning, error"),
    ],
)
def test_argv_for_refuses_what_the_program_would_refuse(values, error, message):
    with pytest.raises(error, match=message):
        argv_for(Settings, **values)


def test_a_check_across_settings_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        parse(Settings, ["--namespace", "ns", "--lease-duration", "3"], prog="python -m agn.operator")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "python -m agn.operator: error: renew interval must be > 0 and < two thirds of the lease duration" in err
