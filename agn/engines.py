"""The inference engines whose load the operator reads: names, health and what their answers mean.

One table (:data:`FORMATS`), read by three parties: the operator's probe and scrape
(:mod:`agn.operator.probe_http`, :mod:`agn.operator.prometheus`: where health is, which metric
means running, waiting and KV-cache usage, which of several series count), the fake provider
(:mod:`agn.provider.expositions`, which serves each format so every one is tested end to end)
and ``provider-drain --wait-idle`` (:mod:`xtask.drain.core.idle`, which names the metric a
provider does not export). Every entry was read from the engine's own code; docs/engines.md
records which file of which version.

A format is told apart by its metric namespace (``vllm:``, ``sglang:``, ``tgi_``,
``llamacpp:``, AGN's ``agn_provider_``): every engine prefixes all of its own metrics, so one
exposition normally carries exactly one. ``InferenceProvider.spec.metrics.format`` is ``auto``
(detect it) or one of these names (pin it). Pure data: no I/O.
"""

from __future__ import annotations

import dataclasses

AUTO = "auto"
AGN_HEALTH_PATH = "/healthz"
ENGINE_HEALTH_PATH = "/health"
# SGLang's /health runs a one-token generation by default (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION)
# and takes a second or more; /get_model_info is answered from the HTTP server's own memory.
SGLANG_HEALTH_PATH = "/get_model_info"


@dataclasses.dataclass(frozen=True)
class Format:
    """One exposition format: its gauges, where its health is served and how to read its answers.

    ``kv_cache`` is a fraction (1 means 100 % used); None where the engine exports no such
    gauge (TGI, llama.cpp's current builds, AGN's fake). ``legacy_kv_cache`` is a name older
    builds used for it. ``replica_labels``: labels that tell apart schedulers reporting the
    same batch (tensor/pipeline/expert ranks of one data-parallel rank): one of them is read,
    never their sum. ``total_label``: the label whose empty value marks the total beside the
    series split by it (SGLang's ``priority``). ``lazy_gauges``: the engine renders a gauge only
    once it was set, so a scrape with its other series but not the gauge reads 0 (TGI).
    ``auth_is_up``: a 401 on its health path is the server answering, up, behind an API key.
    ``metrics_off``: what to do when its /metrics is refused (404, 501); ``no_metrics``: what a
    scrape without any of its metrics means."""

    name: str
    namespace: str  # every metric of the engine starts with this
    running: str
    waiting: str
    kv_cache: str | None
    health_path: str
    legacy_kv_cache: str | None = None
    replica_labels: tuple[str, ...] = ()
    total_label: str | None = None
    lazy_gauges: bool = False
    auth_is_up: bool = False
    metrics_off: str = ""
    no_metrics: str = ""

    def kv_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.kv_cache, self.legacy_kv_cache) if n)


AGN = Format("agn", "agn_provider_", "agn_provider_running", "agn_provider_waiting", None, AGN_HEALTH_PATH)
VLLM = Format(
    "vllm",
    "vllm:",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",  # since 0.9.2
    ENGINE_HEALTH_PATH,
    legacy_kv_cache="vllm:gpu_cache_usage_perc",  # deprecated in 0.9, removed in 0.12; read when present
    no_metrics="vLLM started with --disable-log-stats exports none",
)
SGLANG = Format(
    "sglang",
    "sglang:",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    SGLANG_HEALTH_PATH,
    replica_labels=("tp_rank", "pp_rank", "moe_ep_rank"),  # all report with --enable-metrics-for-all-schedulers
    total_label="priority",
    auth_is_up=True,
    metrics_off="start SGLang with --enable-metrics",
)
TGI = Format(
    "tgi",
    "tgi_",
    "tgi_batch_current_size",
    "tgi_queue_size",
    None,
    ENGINE_HEALTH_PATH,
    lazy_gauges=True,
)
LLAMACPP = Format(
    "llamacpp",
    "llamacpp:",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    None,  # current builds export no KV-cache usage gauge
    ENGINE_HEALTH_PATH,
    legacy_kv_cache="llamacpp:kv_cache_usage_ratio",  # older builds' gauge, read when present
    metrics_off="start llama-server with --metrics",
)

FORMATS: dict[str, Format] = {f.name: f for f in (AGN, VLLM, SGLANG, TGI, LLAMACPP)}
FORMAT_NAMES: tuple[str, ...] = (AUTO, *FORMATS)  # spec.metrics.format's enum, in the CRD's order

# Health paths ``auto`` tries, in order, each only when the one before gave no verdict (see
# VERDICT_DOWN): AGN's own first (a fleet of fake providers pays one request, as before), then
# SGLang's (before /health, which on SGLang generates a token and outlasts a probe's timeout),
# then the other engines'.
AUTO_HEALTH_PATHS: tuple[str, ...] = (AGN_HEALTH_PATH, SGLANG_HEALTH_PATH, ENGINE_HEALTH_PATH)
# A health answer that is a verdict on the server, not on the path: 2xx (up) and 503 (AGN's fake
# unhealthy; llama-server answers 503 on every path while it loads its model). Anything else
# on a path that is not the last (404: no such route; 401: llama-server --api-key guards every
# path but /health; 405, ...) says nothing about the server, so ``auto`` asks the next path.
VERDICT_DOWN = 503


def format_of(name: str) -> Format | None:
    """The pinned format called ``name``; None for ``auto`` and for a name no format has."""
    return FORMATS.get(name)


def health_paths(format_name: str) -> tuple[str, ...]:
    """Where a provider of this ``spec.metrics.format`` serves its health, in the order to try."""
    pinned = format_of(format_name)
    return (pinned.health_path,) if pinned is not None else AUTO_HEALTH_PATHS


def is_verdict(code: int) -> bool:
    """Whether a health answer judges the server (see :data:`VERDICT_DOWN`)."""
    return 200 <= code < 300 or code == VERDICT_DOWN


def metrics_refusal(code: int, format_name: str) -> str:
    """Why ``GET /metrics`` answered ``code`` (not 2xx), with what to do about it where known.
    A 401 or 403 stays ``HTTP 401``: what to do depends on the provider's ``spec.authorization``,
    which :func:`agn.credentials.refused_message` names."""
    fmt = format_of(format_name)
    if code == 501 and format_name in (AUTO, LLAMACPP.name):
        return f"HTTP 501: metrics endpoint off ({LLAMACPP.metrics_off})"
    if code == 400 and format_name in (AUTO, LLAMACPP.name):
        return (
            "HTTP 400: llama-server in router mode serves /metrics per model (?model=NAME); "
            "point the provider at one model's server"
        )
    if code == 404 and fmt is not None and fmt.metrics_off:
        return f"HTTP 404: no metrics endpoint ({fmt.metrics_off})"
    return f"HTTP {code}"


def no_metrics_note(fmt: Format) -> str:
    """What a successful scrape that carries none of ``fmt``'s metrics means, for a person."""
    hint = f" ({fmt.no_metrics})" if fmt.no_metrics else ""
    return f"the scrape has no {fmt.namespace} metrics{hint}"
