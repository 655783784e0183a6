"""Parsing provider metrics: absent stays absent, never zero."""

from __future__ import annotations

import pytest

from agn.engines import AGN
from agn.operator.prometheus import LoadReading, MetricsParseError, count_of, load_reading, parse_samples

FAKE_PROVIDER_TEXT = """\
# HELP agn_provider_running Requests currently executing.
# TYPE agn_provider_running gauge
agn_provider_running 3
# HELP agn_provider_waiting Requests queued.
# TYPE agn_provider_waiting gauge
agn_provider_waiting 7
"""


def test_reads_both_gauges():
    assert load_reading(FAKE_PROVIDER_TEXT) == LoadReading(running=3, waiting=7, format="agn")


def test_absent_metric_is_none_not_zero():
    text = "agn_provider_running 0\n"
    assert load_reading(text) == LoadReading(running=0, waiting=None, format="agn")
    empty = load_reading("")
    assert (empty.running, empty.waiting, empty.format) == (None, None, None)
    assert load_reading("# only comments\n\n") == empty  # no numbers; a note says why (test_engine_parsing)


def test_prefix_names_do_not_match():
    text = "agn_provider_waiting_total 5\nagn_provider_running_seconds 1\n"
    assert load_reading(text) == LoadReading(None, None, format="agn")


def test_labels_timestamps_and_floats():
    text = 'agn_provider_running{model="a"} 2 1700000000000\nagn_provider_running{model="b, c\\"q"} 3.0\n'
    samples = parse_samples(text)
    assert samples[1].labels == (("model", 'b, c"q'),)
    assert count_of(samples, "agn_provider_running", AGN) == 5.0
    assert load_reading(text).running == 5


def test_unlabelled_sample_wins_over_labelled():
    assert count_of(parse_samples('x{a="1"} 4\nx 9\n'), "x", AGN) == 9


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-1"])
def test_non_finite_or_negative_counts_are_absent(value):
    assert load_reading(f"agn_provider_waiting {value}\n").waiting is None


@pytest.mark.parametrize(
    "text",
    [
        "agn_provider_running\n",
        "agn_provider_running abc\n",
        '{x="1"} 2\n',
        'agn_provider_running{x="1" 2\n',
        "agn_provider_running 1_000\n",
        "# TYPE agn_provider_running\n",
    ],
)
def test_malformed_lines_fail_the_scrape(text):
    with pytest.raises(MetricsParseError):
        load_reading(text)


def test_a_counter_is_not_a_load_gauge():
    # The exposition format's typing: a counter's samples are named ..._total, so a provider
    # that types its load as a counter has no gauge reading (absent, not 0).
    text = "# TYPE agn_provider_waiting counter\nagn_provider_waiting 4\nagn_provider_running 2\n"
    assert load_reading(text) == LoadReading(running=2, waiting=None, format="agn")
