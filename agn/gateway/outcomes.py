"""How a gateway request ended: the ``outcome`` label of ``agn_gateway_requests_total``.

Kept apart from :mod:`agn.gateway.metrics` so that readers of the counters (the drain's wave
gates) know the names without importing ``prometheus_client``'s collectors.
"""

from __future__ import annotations

ROUTED = "routed"  # 200
NO_ROUTE = "no_route"  # 503: no admitted candidate
UPSTREAM_ERROR = "upstream_error"  # 502
BAD_REQUEST = "bad_request"  # 400/413
NO_CANDIDATE = "none"  # the admission_state label when no candidate was chosen
