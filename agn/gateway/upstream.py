"""Forwarding one completion request to the chosen provider.

Plain urllib with a timeout and no proxy (providers are dialled directly, and a proxy from
the environment must not intercept loopback traffic). This module must not choose providers
or touch the routing table; it reports failures as :class:`UpstreamError`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class UpstreamError(Exception):
    """The provider could not be reached or did not answer with a JSON object; ``status`` is
    its HTTP status when it answered one (0: none)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def post_completion(
    endpoint: str, body: bytes, *, session: str | None, timeout: float, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """POST ``body`` to ``{endpoint}/v1/completions`` (with ``headers``: the provider's
    credentials); the provider's JSON object."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    if session:
        headers["x-session-id"] = session
    request = urllib.request.Request(
        endpoint.rstrip("/") + "/v1/completions", data=body, method="POST", headers=headers
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise UpstreamError(f"provider answered HTTP {exc.code}", status=exc.code) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise UpstreamError(f"provider unreachable: {exc}") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise UpstreamError("provider answered with something that is not JSON") from exc
    if not isinstance(data, dict):
        raise UpstreamError("provider answered with JSON that is not an object")
    return data
