"""The fake provider's ``/metrics`` in each format the operator reads (``--metrics-format``).

AGN's own (``agn_provider_running``, ``agn_provider_waiting``) and, so that every engine's
format is tested end to end against the real operator, the shape of vLLM's, SGLang's, TGI's
and llama.cpp's server's expositions: the gauges :mod:`agn.engines` names, with their engine's
``# TYPE`` lines, and a counter beside them that the operator must not read as load.

The load is the fake's own (``running``: completions in flight; ``waiting`` and
``kvCacheUsage``: set over ``/admin/state``). vLLM and SGLang report one series per
data-parallel engine or scheduler; this fake splits its counts over two such series (labels
as those engines name them, values made up), so the operator's sum is exercised. TGI and
llama.cpp's server report one unlabelled series. ``exportWaiting: false`` drops the waiting
gauge in every format: a provider whose waiting is unknown, never 0. Pure: numbers in, text out.
"""

from __future__ import annotations

import dataclasses

from agn.engines import FORMATS, Format

SERIES = 2  # data-parallel ranks of the vLLM and SGLang shapes


@dataclasses.dataclass(frozen=True)
class Load:
    """What one exposition reports."""

    name: str
    running: int
    waiting: int
    export_waiting: bool
    kv_cache_usage: float
    served: int


def _split(total: int) -> list[int]:
    """``total`` over :data:`SERIES` ranks, as even as it goes (sums back to ``total``)."""
    return [total // SERIES + (1 if i < total % SERIES else 0) for i in range(SERIES)]


def _family(name: str, kind: str, help_: str, series: list[tuple[str, float | int]]) -> list[str]:
    """One metric family: HELP, TYPE and its samples (``(labels text, value)``)."""
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *(f"{name}{labels} {value}" for labels, value in series)]


def _ranked(label: str, model: str, values: list[int] | list[float]) -> list[tuple[str, float | int]]:
    return [(f'{{model_name="{model}",{label}="{i}"}}', v) for i, v in enumerate(values)]


def _agn(load: Load) -> list[str]:
    lines = _family("agn_provider_running", "gauge", "Requests currently executing.", [("", load.running)])
    if load.export_waiting:
        lines += _family("agn_provider_waiting", "gauge", "Requests queued.", [("", load.waiting)])
    return lines


def _data_parallel(fmt: Format, load: Load, *, label: str, counter: str) -> list[str]:
    """vLLM's and SGLang's shape: every gauge once per rank (``label``), KV usage per rank."""
    model = f"fake-{load.name}"
    assert fmt.kv_cache is not None
    lines = _family(fmt.running, "gauge", "Requests running.", _ranked(label, model, _split(load.running)))
    if load.export_waiting:
        lines += _family(fmt.waiting, "gauge", "Requests waiting.", _ranked(label, model, _split(load.waiting)))
    lines += _family(
        fmt.kv_cache,
        "gauge",
        "KV-cache usage. 1 means 100 percent.",
        _ranked(label, model, [load.kv_cache_usage] * SERIES),
    )
    return lines + _family(counter, "counter", "Requests finished.", [(f'{{model_name="{model}"}}', load.served)])


def _single(fmt: Format, load: Load, *, counter: str, kv_cache: str | None) -> list[str]:
    """TGI's and llama.cpp's server's shape: one unlabelled series per gauge."""
    lines = _family(fmt.running, "gauge", "Requests running.", [("", load.running)])
    if load.export_waiting:
        lines += _family(fmt.waiting, "gauge", "Requests waiting.", [("", load.waiting)])
    if kv_cache:
        lines += _family(kv_cache, "gauge", "KV-cache usage. 1 means 100 percent.", [("", load.kv_cache_usage)])
    return lines + _family(counter, "counter", "Requests finished.", [("", load.served)])


def exposition(format_name: str, load: Load) -> str:
    """``/metrics`` of a fake provider serving ``format_name`` (a name of :data:`agn.engines.FORMATS`)."""
    fmt = FORMATS[format_name]
    if fmt.name == "vllm":
        lines = _data_parallel(fmt, load, label="engine", counter="vllm:request_success_total")
    elif fmt.name == "sglang":
        lines = _data_parallel(fmt, load, label="dp_rank", counter="sglang:num_requests_total")
    elif fmt.name == "tgi":
        lines = _single(fmt, load, counter="tgi_request_success", kv_cache=None)
    elif fmt.name == "llamacpp":
        # llama.cpp's server exports no KV-cache gauge today; older builds did, under this name.
        lines = _single(fmt, load, counter="llamacpp:tokens_predicted_total", kv_cache=fmt.legacy_kv_cache)
    else:
        lines = _agn(load)
    return "\n".join(lines) + "\n"
