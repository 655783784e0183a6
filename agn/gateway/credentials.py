"""A completion's credentials: the bearer token of the candidate's ``authorization``
(:mod:`agn.credentials`), read by this gateway from the Secret the overlay names.

The overlay carries only the Secret's name and key; the gateway reads the Secret under its own
Role (``resourceNames``: the Secrets its network's providers name). A token that cannot be had is
an :class:`agn.gateway.upstream.UpstreamError` naming the Secret and the reason (the request is
answered 502, as any provider failure), never the token. A provider's 401 makes the next
request read the Secret again (it may have been rotated).
"""

from __future__ import annotations

from agn.credentials import CredentialsError, Tokens, bearer, refused_message
from agn.gateway.upstream import UpstreamError
from agn.model import Candidate

COMPLETIONS = "POST /v1/completions"


def credentials(tokens: Tokens | None, cand: Candidate) -> dict[str, str] | None:
    """The headers that carry ``cand``'s credentials (None: it names none)."""
    ref = cand.authorization
    if ref is None:
        return None
    if tokens is None:
        raise UpstreamError(f"credentials: {ref.describe()}: this gateway reads no Secrets")
    try:
        return bearer(tokens.token(ref))
    except CredentialsError as exc:
        raise UpstreamError(f"credentials ({exc.reason}): {exc}") from None


def named_refusal(tokens: Tokens | None, cand: Candidate, exc: UpstreamError) -> UpstreamError:
    """``exc`` with a 401/403 answer named (what to check); forgets a refused token."""
    if exc.status not in (401, 403):
        return exc
    if tokens is not None and cand.authorization is not None:
        tokens.forget(cand.authorization)
    reason, message = refused_message(COMPLETIONS, exc.status, cand.authorization)
    return UpstreamError(f"provider refused the request ({reason}): {message}", status=exc.status)
