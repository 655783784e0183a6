"""The one duration type of every time flag (xtask/durations.py, xtask.params.DurationType)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from xtask.durations import MAX_SECONDS, describe, parse_seconds
from xtask.params import DurationType


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("1.5h", 5400.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1m30s500ms", 90.5),
        (".5s", 0.5),
        ("0", 0.0),
        # bare numbers as the seconds flags read them before (float()): kept
        ("2.5", 2.5),
        ("1e3", 1000.0),
        (" 120 ", 120.0),
    ],
)
def test_forms(text, seconds):
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("5x", "is not a duration"),
        ("-1s", "is not a duration"),
        ("-1", "is a negative duration"),
        ("nan", "is not a duration"),
        ("-nan", "is not a duration"),
        ("1e400", "is too long a duration"),
        ("inf", "is too long a duration"),
        (str(MAX_SECONDS + 1), "is too long a duration"),
        ("", "is not a duration"),
        ("  ", "is not a duration"),
        ("1h 30m", "is not a duration"),
        ("1.5.5s", "is not a duration"),
        ("2w", "is not a duration"),
        ("s", "is not a duration"),
        ("\x1b[31m5", "is not a duration"),
    ],
)
def test_bad_values_name_the_value(text, why):
    with pytest.raises(ValueError, match=why) as exc:
        parse_seconds(text)
    assert str(exc.value).startswith(repr(text).replace("\\x1b", "\\x1b"))


def test_bounds_and_whole_seconds():
    assert DurationType().convert("1.5h", None, None) == 5400.0
    assert DurationType(whole=True).convert("1.5h", None, None) == 5400
    assert isinstance(DurationType(whole=True).convert("90s", None, None), int)
    assert DurationType(zero=True).convert("0", None, None) == 0.0
    assert DurationType().convert(120.0, None, None) == 120.0  # a default passes through
    for kind, text, why in [
        (DurationType(), "0s", "is not a positive duration"),
        (DurationType(minimum=1), "500ms", "is shorter than 1 second"),
        (DurationType(maximum=3600), "2h", "is longer than 1 hour"),
        (DurationType(maximum=366 * 86400), "400d", "is longer than 366 days"),
        (DurationType(whole=True), "1.5s", "is not a whole number of seconds"),
    ]:
        with pytest.raises(click.BadParameter, match=why):
            kind.convert(text, None, None)


def test_describe():
    assert [describe(s) for s in (1, 90, 60, 3600, 86400 * 2, 0.5)] == [
        "1 second",
        "90 seconds",
        "1 minute",
        "1 hour",
        "2 days",
        "0.5 seconds",
    ]


@pytest.mark.parametrize("value", ["5x", "-1s", "nan", "1e400", ""])
def test_a_flag_names_itself_and_the_value_and_exits_2(value):
    ran = []

    @click.command()
    @click.option("--timeout", type=DurationType(minimum=1), default=120.0)
    def command(timeout):
        ran.append(timeout)

    result = CliRunner().invoke(command, ["--timeout", value])
    assert result.exit_code == 2 and not ran
    assert f"Invalid value for '--timeout': {value!r}" in result.output
