"""Non-finite numbers (nan, inf, 1e999) are usage errors wherever a float is parsed."""

from __future__ import annotations

import pytest

from agn.operator.__main__ import parse_args as operator_args
from xtask.__main__ import main

NOT_FINITE = ["nan", "NaN", "inf", "-inf", "+Infinity", "1e999"]


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("flag", ["--qps", "--timeout"])
def test_provider_drain_rejects_non_finite(capsys, flag, value):
    code = main(["env", "provider-drain", "--provider", "p", flag, value])
    err = capsys.readouterr().err
    assert code == 2
    # --timeout is a duration (xtask/durations.py): nan is not one, +infinity is too long, -inf negative
    durations = {"nan": "is not a duration", "-inf": "is a negative duration"}
    why = "is not a finite number" if flag == "--qps" else durations.get(value.lower(), "is too long a duration")
    assert f"Invalid value for '{flag}'" in err and f"{value!r} {why}" in err


@pytest.mark.parametrize("value", NOT_FINITE)
def test_env_up_rejects_non_finite_timeout(capsys, value):
    assert main(["env", "up", "--timeout", value]) == 2
    assert "Invalid value for '--timeout'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--qps", "0", "0.0 is not in the range x>=0.1"),
        ("--timeout", "0.5", "'0.5' is shorter than 1 second"),
        ("--qps", "fast", "'fast' is not a valid float"),
    ],
)
def test_ranges_and_garbage_still_rejected(capsys, flag, value, message):
    assert main(["env", "provider-drain", "--provider", "p", flag, value]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag",
    [
        "--probe-interval",
        "--probe-timeout",
        "--probe-fast-interval",
        "--probe-down-interval",
        "--resync",
        "--coalesce-window",
        "--max-batch-wait",
        "--burst-batch-wait",
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "1e999", "soon"])
def test_operator_rejects_non_finite_and_garbage(capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        operator_args(["--namespace", "ns", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value) in err and "Traceback" not in err


def test_operator_accepts_finite_values():
    args = operator_args(["--namespace", "ns", "--probe-interval", "0.5", "--coalesce-window", "0"])
    assert (args.probe_interval, args.coalesce_window) == (0.5, 0.0)


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--probe-concurrency", "0", "must be a whole number >= 1, got 0"),
        ("--probe-concurrency", "2.5", "must be a whole number >= 1, got '2.5'"),
        ("--probe-jitter", "1.5", "must be within 0 and 1, got 1.5"),
        ("--probe-jitter", "-0.1", "must be >= 0, got -0.1"),
        ("--probe-jitter", "nan", "must be a finite number, got 'nan'"),
    ],
)
def test_operator_probe_scheduling_flags_are_checked(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exc:
        operator_args(["--namespace", "ns", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and message in err and "Traceback" not in err


def test_operator_probe_scheduling_defaults_and_values():
    assert (
        operator_args(["--namespace", "ns"]).probe_concurrency,
        operator_args(["--namespace", "ns"]).probe_jitter,
    ) == (64, 0.1)
    args = operator_args(["--namespace", "ns", "--probe-concurrency", "4", "--probe-jitter", "0"])
    assert (args.probe_concurrency, args.probe_jitter) == (4, 0.0)
