"""Reading each engine's exposition (vLLM, SGLang, TGI, llama.cpp's server, AGN's own): which
metric is running, waiting and KV-cache usage; series summed; absent stays absent; two engines'
metrics in one scrape are an error; the format is detected or pinned. Also the fake provider's
expositions read back through the same parser, the status fields and the CRD's enum."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agn.engines import FORMAT_NAMES, FORMATS, health_paths
from agn.model import NetworkView
from agn.objects import rfc3339
from agn.operator import prometheus
from agn.operator.prometheus import LoadReading, MetricsFormatError, MetricsParseError, load_reading
from agn.operator.provider_status import ProbeOutcome, next_status, semantic_key, should_write
from agn.provider.expositions import Load, exposition

REPO = Path(__file__).resolve().parents[2]

# Shaped as each engine serves it (names and types from its own code; docs/engines.md), two
# data-parallel series where the engine has them, and a counter that is not load.
VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 9.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
"""
# SGLang's scheduler labels (python/sglang/srt/managers/scheduler_metrics_mixin.py): one series per
# data-parallel rank; tensor ranks of one dp rank report the same batch.
SGLANG_LABELS = 'engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0"'
SGLANG = f"""\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{dp_rank="0",{SGLANG_LABELS},tp_rank="0"}} 3.0
sglang:num_running_reqs{{dp_rank="1",{SGLANG_LABELS},tp_rank="0"}} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{dp_rank="0",{SGLANG_LABELS},tp_rank="0"}} 1.0
sglang:num_queue_reqs{{dp_rank="1",{SGLANG_LABELS},tp_rank="0"}} 2.0
# TYPE sglang:token_usage gauge
sglang:token_usage{{dp_rank="0",{SGLANG_LABELS},tp_rank="0"}} 0.28
sglang:token_usage{{dp_rank="1",{SGLANG_LABELS},tp_rank="0"}} 0.11
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{model_name="m"}} 77.0
"""
# TGI's router renders a metric only once set; tgi_batch_max_total_tokens is set at start.
TGI = """\
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 16000

# TYPE tgi_request_count counter
tgi_request_count 5

# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 4

# TYPE tgi_queue_size gauge
tgi_queue_size 7

# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 1
tgi_request_duration_bucket{le="+Inf"} 1
tgi_request_duration_sum 0.25
tgi_request_duration_count 1
"""
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 12
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""
AGN = "# TYPE agn_provider_running gauge\nagn_provider_running 1\n# TYPE agn_provider_waiting gauge\nagn_provider_waiting 2\n"
TEXTS = {"vllm": VLLM, "sglang": SGLANG, "tgi": TGI, "llamacpp": LLAMACPP, "agn": AGN}


@pytest.mark.parametrize(
    ("fmt", "want"),
    [
        ("vllm", LoadReading(running=3, waiting=4, kv_cache_usage=0.5, format="vllm")),
        ("sglang", LoadReading(running=6, waiting=3, kv_cache_usage=0.28, format="sglang")),
        ("tgi", LoadReading(running=4, waiting=7, kv_cache_usage=None, format="tgi")),
        ("llamacpp", LoadReading(running=1, waiting=0, kv_cache_usage=None, format="llamacpp")),
        ("agn", LoadReading(running=1, waiting=2, kv_cache_usage=None, format="agn")),
    ],
)
def test_each_format_is_detected_and_read_series_summed_kv_the_fullest(fmt, want):
    assert load_reading(TEXTS[fmt]) == want
    assert load_reading(TEXTS[fmt], format=fmt) == want  # pinned: the same reading


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "llamacpp", "agn"])
def test_a_missing_waiting_metric_stays_absent_never_zero(fmt):
    waiting = FORMATS[fmt].waiting
    text = "\n".join(line for line in TEXTS[fmt].splitlines() if waiting not in line) + "\n"
    reading = load_reading(text)
    assert reading.waiting is None and reading.running is not None and reading.format == fmt


def test_a_counter_named_like_a_gauge_is_not_load():
    text = "# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting_total 5\nvllm:num_requests_running 1\n"
    assert load_reading(text) == LoadReading(running=1, waiting=None, format="vllm")


@pytest.mark.parametrize(("a", "b"), [("vllm", "sglang"), ("tgi", "llamacpp"), ("agn", "vllm")])
def test_two_engines_in_one_scrape_are_an_error_naming_both(a, b):
    with pytest.raises(MetricsFormatError) as exc:
        load_reading(TEXTS[a] + TEXTS[b])
    assert a in str(exc.value) and b in str(exc.value) and "spec.metrics.format" in str(exc.value)
    assert isinstance(exc.value, MetricsParseError)  # a failed scrape, as the prober records it


def test_a_pinned_format_reads_its_own_metrics_beside_anothers():
    assert load_reading(VLLM + SGLANG, format="sglang").running == 6


def test_a_pinned_format_the_scrape_does_not_carry_is_an_error():
    with pytest.raises(MetricsFormatError, match="vllm metrics, not tgi"):
        load_reading(VLLM, format="tgi")
    with pytest.raises(MetricsFormatError, match="'triton' is not one of auto, agn"):
        load_reading(VLLM, format="triton")


def test_no_known_metric_is_no_format_and_no_numbers():
    assert load_reading("process_cpu_seconds_total 3\n") == LoadReading(None, None, note=prometheus.NO_KNOWN_METRIC)
    assert load_reading("") == LoadReading(None, None, note=prometheus.NO_KNOWN_METRIC)
    assert "--disable-log-stats" in prometheus.NO_KNOWN_METRIC  # an unpinned vLLM without its metrics


def test_a_pinned_vllm_without_its_metrics_says_disable_log_stats():
    reading = load_reading("process_start_time_seconds 1.7e+09\n", format="vllm")
    assert (reading.running, reading.waiting, reading.format) == (None, None, "vllm")
    assert reading.note == "the scrape has no vllm: metrics (vLLM started with --disable-log-stats exports none)"
    assert load_reading(VLLM, format="vllm").note is None


def test_sglang_priority_totals_are_read_once_not_again_by_their_split():
    # --enable-priority-scheduling: each count as the total (priority="") and again per priority.
    lines = ["# TYPE sglang:num_running_reqs gauge", "# TYPE sglang:num_queue_reqs gauge"]
    for rank, (running, waiting) in enumerate([(3, 2), (1, 0)]):
        for name, total in (("sglang:num_running_reqs", running), ("sglang:num_queue_reqs", waiting)):
            labels = f'dp_rank="{rank}",{SGLANG_LABELS},tp_rank="0"'
            lines.append(f'{name}{{{labels},priority=""}} {total}')
            lines.append(f'{name}{{{labels},priority="0"}} {total - total // 2}')
            lines.append(f'{name}{{{labels},priority="5"}} {total // 2}')
    reading = load_reading("\n".join(lines) + "\n")
    assert (reading.running, reading.waiting) == (4, 2)
    # Only the split published (no total): the split is the count.
    split_only = "\n".join(line for line in lines if 'priority=""' not in line) + "\n"
    assert (load_reading(split_only).running, load_reading(split_only).waiting) == (4, 2)


def test_sglang_tensor_ranks_of_one_batch_are_read_once_dp_ranks_summed():
    # --enable-metrics-for-all-schedulers: every tp rank of a dp rank reports the same batch.
    text = "".join(
        f'sglang:num_running_reqs{{dp_rank="{dp}",{SGLANG_LABELS},tp_rank="{tp}"}} {3 if dp == 0 else 2}\n'
        for dp in (0, 1)
        for tp in (0, 1, 2, 3)
    )
    assert load_reading(text).running == 5


def test_tgi_that_served_nothing_is_idle_not_unknown():
    # TGI renders tgi_batch_current_size and tgi_queue_size only once set: absent with its other
    # series present is never queued, never batched.
    fresh = "# TYPE tgi_batch_max_total_tokens gauge\ntgi_batch_max_total_tokens 16000\n"
    assert load_reading(fresh) == LoadReading(0, 0, None, "tgi")
    assert load_reading(fresh, format="tgi") == LoadReading(0, 0, None, "tgi")
    queued_only = fresh + "tgi_queue_size 2\n"  # queued, no batch ran yet: running 0
    assert (load_reading(queued_only).running, load_reading(queued_only).waiting) == (0, 2)
    # Pinned to TGI, a scrape without any tgi_ series proves nothing: unknown, said so.
    assert load_reading("process_start_time_seconds 1\n", format="tgi") == LoadReading(
        None, None, None, "tgi", note="the scrape has no tgi_ metrics"
    )
    # Only TGI's gauges are lazy: another engine's missing gauge stays absent.
    assert load_reading("vllm:num_requests_running 0\n").waiting is None


def test_kv_usage_outside_zero_to_one_is_absent_and_older_names_are_read():
    assert load_reading("vllm:num_requests_running 0\nvllm:kv_cache_usage_perc 1.5\n").kv_cache_usage is None
    assert load_reading("vllm:kv_cache_usage_perc NaN\n").kv_cache_usage is None
    assert load_reading("vllm:gpu_cache_usage_perc 0.3\n").kv_cache_usage == 0.3  # before vLLM 0.9
    both = "vllm:gpu_cache_usage_perc 0.3\nvllm:kv_cache_usage_perc 0.6\n"
    assert load_reading(both).kv_cache_usage == 0.6  # the current name wins
    assert load_reading("llamacpp:kv_cache_usage_ratio 0.7\n").kv_cache_usage == 0.7  # older llama.cpp builds


def test_health_paths_follow_the_format():
    assert health_paths("agn") == ("/healthz",)
    assert all(health_paths(f) == ("/health",) for f in ("vllm", "tgi", "llamacpp"))
    assert health_paths("sglang") == ("/get_model_info",)  # SGLang's /health generates a token
    assert health_paths("auto") == ("/healthz", "/get_model_info", "/health")
    assert health_paths("triton") == health_paths("auto")  # not pinned to anything: as auto


def test_the_crds_enum_is_the_operators_list_of_formats():
    crd = yaml.safe_load((REPO / "manifests/crds/inferenceproviders.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fmt = spec["properties"]["metrics"]["properties"]["format"]
    assert tuple(fmt["enum"]) == FORMAT_NAMES and fmt["default"] == "auto"


class TestFakeExpositions:
    """The fake provider's ``--metrics-format`` text, read back by the operator's parser."""

    @pytest.mark.parametrize("fmt", sorted(FORMATS))
    def test_each_reads_back_as_the_fakes_load(self, fmt):
        load = Load(name="p", running=5, waiting=3, export_waiting=True, kv_cache_usage=0.4, served=9)
        reading = load_reading(exposition(fmt, load))
        assert (reading.running, reading.waiting, reading.format) == (5, 3, fmt)
        assert reading.kv_cache_usage == (0.4 if fmt in ("vllm", "sglang") else None)  # llama.cpp: none today

    @pytest.mark.parametrize("fmt", sorted(FORMATS))
    def test_waiting_off_drops_the_gauge_in_every_format(self, fmt):
        load = Load(name="p", running=1, waiting=3, export_waiting=False, kv_cache_usage=0.0, served=0)
        assert FORMATS[fmt].waiting not in exposition(fmt, load)
        # Absent is unknown, except on TGI, which renders it only once set: never queued.
        assert load_reading(exposition(fmt, load)).waiting == (0 if fmt == "tgi" else None)

    def test_tgi_renders_its_gauges_only_once_set(self):
        fresh = exposition("tgi", Load("p", 0, 0, True, 0.0, 0, queued_ever=False))
        assert "tgi_batch_max_total_tokens" in fresh and "tgi_queue_size" not in fresh
        assert "tgi_batch_current_size" not in fresh
        served = exposition("tgi", Load("p", 0, 0, True, 0.0, 3, queued_ever=True))
        assert "tgi_queue_size 0" in served and "tgi_batch_current_size 0" in served

    def test_vllm_counters_have_created_series_sglangs_do_not(self):
        load = Load("p", 1, 1, True, 0.5, 4)
        assert "vllm:request_success_created{" in exposition("vllm", load)
        assert "# TYPE vllm:request_success_total counter" in exposition("vllm", load)
        assert "_created" not in exposition("sglang", load)
        labels = ('dp_rank="1"', 'engine_type="unified"', 'moe_ep_rank="0"', 'pp_rank="0"', 'tp_rank="0"')
        assert all(label in exposition("sglang", load) for label in labels)

    def test_sglang_priority_split_reads_back_as_the_load(self):
        load = Load("p", 5, 3, True, 0.4, 0, priority_split=True)
        text = exposition("sglang", load)
        assert 'priority=""' in text and 'priority="1"' in text
        assert (load_reading(text).running, load_reading(text).waiting) == (5, 3)

    @pytest.mark.parametrize("fmt", ["vllm", "sglang", "tgi", "llamacpp"])
    def test_engine_metrics_off_leaves_no_engine_metric(self, fmt):
        text = exposition(fmt, Load("p", 1, 1, True, 0.5, 4, engine_metrics=False))
        assert FORMATS[fmt].namespace not in text
        assert load_reading(text, format=fmt).note is not None

    def test_vllm_and_sglang_split_their_counts_over_two_series(self):
        text = exposition("vllm", Load(name="p", running=3, waiting=0, export_waiting=True, kv_cache_usage=0, served=0))
        assert 'engine="0",model_name="fake-p"} 2.0' in text and 'engine="1",model_name="fake-p"} 1.0' in text


class TestStatus:
    NETS = [NetworkView("net", metrics_max_age_seconds=45)]

    def status(self, *readings: LoadReading, t0: float = 1_700_000_000.0) -> dict:
        status: dict = {}
        for i, r in enumerate(readings):
            outcome = ProbeOutcome(t0 + i, True, True, None, metrics_ok=True, load=r, health_path="/health")
            status = next_status(status, outcome, uid="u", generation=1, endpoint="http://h:1", networks=self.NETS)
        return status

    def test_kv_usage_and_format_are_published_kv_to_tenths(self):
        s = self.status(LoadReading(1, 0, 0.4321, "vllm"))
        assert s["load"] == {"observedAt": rfc3339(1_700_000_000.0), "running": 1, "waiting": 0, "kvCacheUsage": 0.4}
        assert s["probe"]["metricsFormat"] == "vllm"
        available = next(c for c in s["conditions"] if c["type"] == "Available")
        assert available["message"] == "GET /health succeeded"

    def test_no_kv_metric_publishes_no_kv_usage(self):
        assert "kvCacheUsage" not in self.status(LoadReading(1, 0, None, "tgi"))["load"]

    def test_a_kv_change_within_a_tenth_is_no_news_a_tenth_is(self):
        a = self.status(LoadReading(1, 0, 0.41, "vllm"))
        same = self.status(LoadReading(1, 0, 0.41, "vllm"), LoadReading(1, 0, 0.44, "vllm"))
        more = self.status(LoadReading(1, 0, 0.41, "vllm"), LoadReading(1, 0, 0.52, "vllm"))
        assert semantic_key(a) == semantic_key(same)
        assert not should_write(a, same, last_write_at=1.0, now=2.0, refresh=None)
        assert should_write(a, more, last_write_at=1.0, now=2.0, refresh=None)

    def test_a_failed_scrape_keeps_the_format_of_the_last_reading(self):
        s = self.status(LoadReading(0, 0, None, "sglang"))
        failed = ProbeOutcome(
            1_700_000_001.0, True, True, None, metrics_error="GET /metrics: the metrics mix formats (sglang, vllm)"
        )
        after = next_status(s, failed, uid="u", generation=1, endpoint="http://h:1", networks=self.NETS)
        assert after["probe"]["metricsFormat"] == "sglang"
        assert after["probe"]["metricsError"].endswith("mix formats (sglang, vllm)")

    def test_a_scrape_without_the_engines_metrics_says_why_in_metrics_fresh(self):
        note = "the scrape has no vllm: metrics (vLLM started with --disable-log-stats exports none)"
        s = self.status(LoadReading(None, None, None, "vllm", note=note))
        fresh = next(c for c in s["conditions"] if c["type"] == "MetricsFresh")
        assert (fresh["status"], fresh["message"]) == ("True", f"last successful scrape within 45s; {note}")
        assert "running" not in s["load"] and s["probe"]["metricsFormat"] == "vllm"

    def test_an_sglang_up_behind_its_api_key_says_so_in_available(self):
        note = "HTTP 401: the server is up, behind sglang's --api-key"
        outcome = ProbeOutcome(1.0, True, True, None, metrics_ok=True, health_path="/get_model_info", health_note=note)
        s = next_status({}, outcome, uid="u", generation=1, endpoint="http://h:1", networks=self.NETS)
        available = next(c for c in s["conditions"] if c["type"] == "Available")
        assert (available["status"], available["message"]) == ("True", f"GET /get_model_info: {note}")
