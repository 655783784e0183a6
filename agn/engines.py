"""The inference engines whose load the operator reads: each one's metric names and health path.

One table (:data:`FORMATS`), read by three parties: the operator's scrape
(:mod:`agn.operator.prometheus`, which metric means running, waiting and KV-cache usage), the
fake provider (:mod:`agn.provider.expositions`, which serves each format so every one is tested
end to end) and ``provider-drain --wait-idle`` (:mod:`xtask.drain.core.idle`, which names the
metric a provider does not export). The names were confirmed from each engine's own code and
docs; docs/engines.md records where.

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


@dataclasses.dataclass(frozen=True)
class Format:
    """One exposition format: what its gauges are called and where its health is served.

    ``kv_cache`` is a fraction (1 means 100 % used); None where the engine exports no such
    gauge (TGI, AGN's fake). ``legacy_kv_cache`` is a name older builds used for it."""

    name: str
    namespace: str  # every metric of the engine starts with this
    running: str
    waiting: str
    kv_cache: str | None
    health_path: str
    legacy_kv_cache: str | None = None

    def kv_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.kv_cache, self.legacy_kv_cache) if n)


AGN = Format("agn", "agn_provider_", "agn_provider_running", "agn_provider_waiting", None, AGN_HEALTH_PATH)
VLLM = Format(
    "vllm",
    "vllm:",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    ENGINE_HEALTH_PATH,
    legacy_kv_cache="vllm:gpu_cache_usage_perc",  # before 0.9; deprecated since
)
SGLANG = Format(
    "sglang", "sglang:", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", ENGINE_HEALTH_PATH
)
TGI = Format("tgi", "tgi_", "tgi_batch_current_size", "tgi_queue_size", None, ENGINE_HEALTH_PATH)
LLAMACPP = Format(
    "llamacpp",
    "llamacpp:",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    None,  # current builds export no KV-cache usage gauge
    ENGINE_HEALTH_PATH,
    legacy_kv_cache="llamacpp:kv_cache_usage_ratio",  # older builds' gauge, read when present
)

FORMATS: dict[str, Format] = {f.name: f for f in (AGN, VLLM, SGLANG, TGI, LLAMACPP)}
FORMAT_NAMES: tuple[str, ...] = (AUTO, *FORMATS)  # spec.metrics.format's enum, in the CRD's order

# Health paths ``auto`` tries, in order: AGN's own first (a fleet of fake providers pays one
# request, as before), then the engines' (only when the first answered 404: no such route).
AUTO_HEALTH_PATHS: tuple[str, ...] = (AGN_HEALTH_PATH, ENGINE_HEALTH_PATH)


def format_of(name: str) -> Format | None:
    """The pinned format called ``name``; None for ``auto`` and for a name no format has."""
    return FORMATS.get(name)


def health_paths(format_name: str) -> tuple[str, ...]:
    """Where a provider of this ``spec.metrics.format`` serves its health, in the order to try."""
    pinned = format_of(format_name)
    return (pinned.health_path,) if pinned is not None else AUTO_HEALTH_PATHS
