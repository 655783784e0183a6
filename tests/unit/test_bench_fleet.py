"""The fleet benchmark's pure parts: its size flags, the Prometheus sums it reports, the RSS
reading by pid, and a table that states timeouts and goal verdicts per row (the benchmark
itself is run by hand; its numbers are never asserted)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench"


def load_fleet():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("fleet_bench", BENCH / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fleet = load_fleet()


def test_sizes_are_sorted_and_unique_and_bad_ones_are_named():
    assert fleet.sizes("5000, 500,2000,500", top=10_000) == [500, 2000, 5000]
    with pytest.raises(argparse.ArgumentTypeError, match="'5k' is not a whole number"):
        fleet.sizes("500,5k", top=10_000)
    with pytest.raises(argparse.ArgumentTypeError, match="10001 is outside 1..10000"):
        fleet.sizes("10001", top=10_000)
    with pytest.raises(SystemExit):  # argparse turns it into a usage error
        fleet.parse_args(["--providers", "0"])
    assert fleet.parse_args(["--providers", "10000", "--consumers", "10,2"]).consumers == [2, 10]


def test_metric_sum_adds_every_labelled_sample_of_one_name_only():
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests.",
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="200",resource="inferenceproviders",verb="PATCH"} 7',
            'apiserver_request_total{code="200",resource="inferenceproviders",subresource="status",verb="PATCH"} 50',
            'apiserver_request_total{code="200",resource="routingoverlays",verb="WATCH"} 3',
            'apiserver_request_total{code="409",resource="routingoverlays",verb="PUT"} 1',
            "# TYPE apiserver_request_duration_seconds histogram",
            'apiserver_request_duration_seconds_bucket{le="+Inf"} 99',
            "apiserver_request_duration_seconds_count 99",
            "apiserver_request_duration_seconds_sum 1.5",
            "# TYPE agn_probe_backlog gauge",
            "agn_probe_backlog 12",
            "",
        ]
    )
    assert fleet.metric_sum(text, "apiserver_request_total") == 61
    assert fleet.metric_sum(text, "apiserver_request_total", skip=fleet.probe_status_write) == 11
    assert fleet.metric_sum(text, "agn_probe_backlog") == 12
    assert fleet.metric_sum(text, "agn_probe_lag_seconds") == 0


def test_rss_is_read_by_pid_and_peak_is_at_least_current():
    current, peak = fleet.rss_mb(os.getpid())
    assert 1 < current <= peak
    with pytest.raises(OSError):
        fleet.rss_mb(2**22 + 1)  # above the kernel's pid limit: no such process


def render_text(rows, baselines, **overrides) -> str:
    args = fleet.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    console = Console(record=True, width=400, no_color=True)
    console.print(fleet.render(rows, baselines, args, "started now"))
    return console.export_text()


def test_table_gives_verdicts_against_the_baseline_and_states_a_timed_out_row():
    base = fleet.Row(4, 2, create_s=0.1, admit_s=0.4, single_s=[1.0, 0.9, 1.1], gw_size=4, gw_s=1.0, gw_revisions=1)
    base.largest = (2048, "InferenceProvider/p0003")
    big = fleet.Row(5000, 2, create_s=20.0, admit_s=75.0, single_s=[3.5], gw_size=100, gw_s=9.0, gw_revisions=6)
    big.largest = (2 * fleet.MIB, "RoutingOverlay/c00")
    big.operator_mb, big.gateway_mb = 250.0, 160.0
    stuck = fleet.Row(10000, 2, create_s=40.0, failure="TIMEOUT after 900s: all 10004 admitted and served")
    big.admission_bytes = fleet.PhaseBytes(
        operator=3 * fleet.MIB, server=3 * fleet.MIB, median=51200, max=102400, count=7
    )
    text = render_text([base, big, stuck], {("this", 2): 1.0})
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert "baseline" in lines["4 x 2"] and "MISSED" not in lines["4 x 2"]
    row = lines["5000 x 2"]
    assert "75.0s MISSED" in row  # admission goal 60 s
    assert "x3.50 MISSED" in row  # single drain goal 3x the 4-provider median (1.0 s)
    assert "6 MISSED" in row  # at most 5 revisions per consumer
    assert "2048.0 KiB MISSED" in row  # 1 MiB per object
    assert "250MB ok" in row and "160MB MISSED" in row
    assert "50.0 / 100.0 KiB ×7; total 3072.0 KiB / 3072.0 KiB" in row  # bytes per publication and in total
    assert "TIMEOUT after 900s" in lines["10000 x 2"] and "MISSED" not in lines["10000 x 2"]
    assert "--probe-interval 1 --probe-concurrency 64" in text  # the operator's settings are stated


def test_overlay_bytes_are_read_from_the_operator_the_server_and_the_log(tmp_path):
    import json

    fb = sys.modules["fleetbytes"]
    operator = (
        'agn_operator_write_bytes_total{kind="index"} 100.0\nagn_operator_write_bytes_total{kind="shard"} 900.0\n'
    )
    operator += 'agn_operator_write_bytes_total{kind="status"} 5000.0\n'
    assert fb.operator_overlay_bytes(operator) == 1000.0
    assert fb.operator_overlay_bytes("") is None  # an operator from before #45
    server = (
        'apiserver_request_body_size_bytes_sum{resource="routingoverlayshards",verb="patch"} 800.0\n'
        'apiserver_request_body_size_bytes_sum{resource="routingoverlays",verb="create"} 200.0\n'
        'apiserver_request_body_size_bytes_sum{resource="inferenceproviders",verb="patch"} 7.0\n'
    )
    assert fb.server_overlay_bytes(server) == 1000.0
    log = tmp_path / "operator.log"
    lines = [{"msg": "overlay published", "bytes_written": 10}, {"msg": "caches synced"}]
    lines += [{"msg": "overlay stored again", "bytes_written": 30}, {"msg": "overlay published", "bytes_written": 20}]
    log.write_text("--- starting\n" + "".join(json.dumps(x) + "\n" for x in lines))
    start = len("--- starting\n") + len(json.dumps(lines[0])) + 1  # a phase that began after the first
    pubs = fb.publications(log, start, log.stat().st_size)
    assert pubs.sizes == [30, 20] and pubs.median == 25 and pubs.max == 30
