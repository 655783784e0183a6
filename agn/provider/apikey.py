"""The fake provider's API key: an engine started with ``--api-key``, checked as that engine does.

One check for every format (:func:`authorized`): with keys set (``--api-key-file``, or
``apiKeys`` over ``/admin/state``), a request for a route the format's engine guards needs one
of them, as ``Authorization: Bearer KEY`` (the ``Bearer`` prefix optional) or ``X-Api-Key: KEY``,
as llama.cpp's server takes it (tools/server/server-http.cpp); anything else is that engine's
401 (:func:`refusal`). Which routes are guarded is each engine's own (:func:`guarded`):

- llama.cpp (and AGN's own format, which follows it): every path but :data:`LLAMACPP_PUBLIC`;
- SGLang (``add_api_key_middleware``): every path but ``/health*`` and ``/metrics``, so its
  ``/get_model_info`` answers 401 while it is up;
- vLLM and TGI: the inference routes only (``/v1/...``), never health or metrics.

``/admin/state`` (loopback-only, the tests' switch) never needs a key. The keys are never shown.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

ADMIN_ROUTE = "/admin/state"
# The fake's own health path is route "/health" whatever the format (agn.provider.server.target).
LLAMACPP_PUBLIC = frozenset({"/health", "/v1/health", "/models", "/v1/models", "/", ADMIN_ROUTE})
INVALID_API_KEY = {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
UNAUTHORIZED = {"error": "Unauthorized"}  # vLLM's and SGLang's 401 body


def api_keys(value: object) -> tuple[str, ...]:
    """The keys of an ``apiKeys`` admin change: a list of non-empty strings (empty: no key needed)."""
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise ValueError("apiKeys must be a list of non-empty strings")
    return tuple(value)


def guarded(metrics_format: str, route: str, *, sglang_open: tuple[str, ...]) -> bool:
    """Whether the engine of ``metrics_format`` wants its key on ``route`` (see the module's list);
    ``sglang_open``: the fake's routes SGLang leaves open (its generating /health, /metrics)."""
    if route == ADMIN_ROUTE:
        return False
    if metrics_format in ("llamacpp", "agn"):
        return route not in LLAMACPP_PUBLIC
    if metrics_format == "sglang":  # its route "/health" is /get_model_info, which is guarded
        return route not in sglang_open
    return route.startswith("/v1/")  # vLLM's and TGI's keys guard the inference routes only


def authorized(keys: tuple[str, ...], headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` carry one of ``keys`` (compared in constant time)."""
    given = headers.get("Authorization") or headers.get("X-Api-Key") or ""
    given = given.removeprefix("Bearer ")
    return any(hmac.compare_digest(given.encode(), key.encode()) for key in keys)


def refusal(metrics_format: str) -> dict[str, Any]:
    """The JSON body of the engine's 401."""
    return INVALID_API_KEY if metrics_format in ("llamacpp", "agn") else UNAUTHORIZED
