"""The fake provider's ``/metrics`` in each format the operator reads (``--metrics-format``).

AGN's own (``agn_provider_running``, ``agn_provider_waiting``) and, so that every engine's
format is tested end to end against the real operator, vLLM's, SGLang's, TGI's and llama.cpp's
server's expositions rebuilt from each engine's own definitions (docs/engines.md names the
files): the metric names, types and label sets the engine declares, rendered as its library
renders them. vLLM and SGLang export through ``prometheus_client`` (so do these, with the same
collector families): vLLM's single-process registry adds a ``_created`` series to each counter,
SGLang's multiprocess collector none. TGI's Rust exporter renders a gauge only once it was set
(``tgi_queue_size`` once a request was queued, ``tgi_batch_current_size`` once a batch ran);
``tgi_batch_max_total_tokens`` is set at start. llama.cpp's server writes its text by hand:
counters, then gauges, unlabelled.

The load is the fake's own (``running``: completions in flight; ``waiting`` and
``kvCacheUsage``: set over ``/admin/state``). vLLM and SGLang report one series per
data-parallel engine or rank; this fake splits its counts over two (labels as those engines
name them, values made up), so the operator's sum is exercised. ``prioritySplit`` adds
SGLang's ``priority`` label: each count once as the total (``priority=""``) and again split by
priority. ``exportWaiting: false`` drops the waiting gauge; ``engineMetrics: false`` drops
every engine metric (vLLM's ``--disable-log-stats``). Pure: numbers in, text out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agn.engines import AGN, LLAMACPP, SGLANG, TGI, VLLM

SERIES = 2  # data-parallel ranks of the vLLM and SGLang shapes
CREATED = 1_700_000_000.0  # the fake's counters' creation time (vLLM's _created series)
PRIORITIES = ("0", "1")  # SGLang's split series under prioritySplit


@dataclasses.dataclass(frozen=True)
class Load:
    """What one exposition reports."""

    name: str
    running: int
    waiting: int
    export_waiting: bool
    kv_cache_usage: float
    served: int
    queued_ever: bool = True  # a request ever entered the queue (TGI's lazy tgi_queue_size)
    engine_metrics: bool = True
    priority_split: bool = False


def _split(total: int | float, parts: int = SERIES) -> list[int | float]:
    """``total`` over ``parts``, as even as it goes (an int sums back to ``total``)."""
    if isinstance(total, float):
        return [total] * parts  # a fraction: each rank's own
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class _Families:
    """A ``prometheus_client`` collector yielding the given families, rendered by its registry."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _render(families: list[Metric]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode()


def _vllm(load: Load) -> str:
    """vLLM's PrometheusStatLogger: labels model_name and engine (one per data-parallel engine)."""
    model = f"fake-{load.name}"
    labels = ["model_name", "engine"]
    running = GaugeMetricFamily(VLLM.running, "Number of requests in model execution batches.", labels=labels)
    waiting = GaugeMetricFamily(VLLM.waiting, "Number of requests waiting to be processed.", labels=labels)
    assert VLLM.kv_cache is not None
    kv = GaugeMetricFamily(VLLM.kv_cache, "KV-cache usage. 1 means 100 percent usage.", labels=labels)
    success = CounterMetricFamily(
        "vllm:request_success", "Count of successfully processed requests.", labels=[*labels, "finished_reason"]
    )
    for i, (r, w) in enumerate(zip(_split(load.running), _split(load.waiting), strict=True)):
        running.add_metric([model, str(i)], r)
        waiting.add_metric([model, str(i)], w)
        kv.add_metric([model, str(i)], load.kv_cache_usage)
        for reason, n in (("stop", _split(load.served)[i]), ("length", 0), ("abort", 0)):
            success.add_metric([model, str(i), reason], n, created=CREATED)
    return _render([running, *([waiting] if load.export_waiting else []), kv, success])


def _sglang(load: Load) -> str:
    """SGLang's SchedulerMetricsCollector and TokenizerMetricsCollector, multiprocess (no _created)."""
    model = f"fake-{load.name}"
    base = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"]
    labels = [*base, "priority"] if load.priority_split else base

    def family(name: str, doc: str, values: list[int | float], *, count: bool = True) -> GaugeMetricFamily:
        split = load.priority_split and count  # a count is split by priority; a usage is not
        fam = GaugeMetricFamily(name, doc, labels=labels if split else base)
        for rank, value in enumerate(values):
            ids = [model, "unified", "0", "0", "0", str(rank)]
            if not split:
                fam.add_metric(ids, value)
                continue
            fam.add_metric([*ids, ""], value)  # the total, and again split by priority
            for priority, part in zip(PRIORITIES, _split(value, len(PRIORITIES)), strict=True):
                fam.add_metric([*ids, priority], part)
        return fam

    assert SGLANG.kv_cache is not None
    families: list[Metric] = [family(SGLANG.running, "The number of running requests.", _split(load.running))]
    if load.export_waiting:
        families.append(family(SGLANG.waiting, "The number of requests in the waiting queue.", _split(load.waiting)))
    families.append(family(SGLANG.kv_cache, "The token usage.", _split(float(load.kv_cache_usage)), count=False))
    served = CounterMetricFamily("sglang:num_requests", "Number of requests processed.", labels=["model_name"])
    served.add_metric([model], load.served)
    return _render([*families, served])


def _text(kind: str, name: str, help_: str, value: float, labels: str = "") -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{labels} {value:g}"]


def _tgi(load: Load) -> str:
    """TGI's router (metrics-exporter-prometheus): unlabelled, and a gauge only once set."""
    lines = _text("gauge", "tgi_batch_max_total_tokens", "Maximum amount of tokens in total.", 16000)
    if load.served or load.running:
        lines += _text("counter", "tgi_request_count", "Total number of requests", load.served + load.running)
        lines += _text("counter", "tgi_request_success", "Number of successful requests", load.served)
        lines += _text("gauge", TGI.running, "Current batch size", load.running)
    if load.export_waiting and (load.queued_ever or load.served or load.running):
        lines += _text("gauge", TGI.waiting, "Current queue size", load.waiting)
    return "\n\n".join("\n".join(lines[i : i + 3]) for i in range(0, len(lines), 3)) + "\n"


def _llamacpp(load: Load) -> str:
    """llama.cpp's server (``--metrics``): its counters, then its gauges; no KV-cache gauge."""
    lines = _text("counter", "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", 4 * load.served)
    lines += _text("counter", "llamacpp:tokens_predicted_total", "Number of generation tokens processed.", load.served)
    lines += _text("counter", "llamacpp:n_decode_total", "Total number of llama_decode() calls", load.served)
    lines += _text("counter", "llamacpp:n_tokens_max", "Largest observed n_tokens.", 8)
    lines += _text("gauge", LLAMACPP.running, "Number of requests processing.", load.running)
    if load.export_waiting:
        lines += _text("gauge", LLAMACPP.waiting, "Number of requests deferred.", load.waiting)
    return "\n".join(lines) + "\n"


def _agn(load: Load) -> str:
    lines = _text("gauge", AGN.running, "Requests currently executing.", load.running)
    if load.export_waiting:
        lines += _text("gauge", AGN.waiting, "Requests queued.", load.waiting)
    return "\n".join(lines) + "\n"


RENDERERS = {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "llamacpp": _llamacpp, "agn": _agn}
# What /metrics carries with engineMetrics off: the process' own metrics only.
NO_ENGINE_METRICS = "# HELP process_start_time_seconds Start time of the process.\n" + (
    "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e+09\n"
)


def exposition(format_name: str, load: Load) -> str:
    """``/metrics`` of a fake provider serving ``format_name`` (a name of :data:`agn.engines.FORMATS`)."""
    if not load.engine_metrics and format_name != "agn":
        return NO_ENGINE_METRICS
    return RENDERERS[format_name](load)
