"""Credentials for engines: the bearer token a provider's ``spec.authorization`` names.

As Prometheus Operator's ServiceMonitor does (``authorization: {type: Bearer, credentials:
{name, key}}``, a SecretKeySelector in the object's own namespace), a provider names one key of
one Secret; its value, trimmed of surrounding whitespace, is the token sent as
``Authorization: Bearer <token>`` — by the operator on its health and metrics probes, by a
consumer gateway on completions. Each reads the Secret itself, under its own RBAC (a Role whose
``resourceNames`` are the Secrets the env's providers name); an overlay carries only the
reference (:class:`SecretRef`), never the token.

A Secret that is missing, lacks the key, holds no usable token or cannot be read is a
:class:`CredentialsError` with a reason a status can show (``SecretNotFound``,
``SecretKeyNotFound``, ``InvalidCredentials``, ``SecretForbidden``, ``SecretUnreadable``); its
message names the Secret and key, never the token. :class:`Tokens` keeps what it read for
:data:`DEFAULT_TTL` seconds (errors too), so a rotated token takes effect within that, at once
after a provider answers 401 (:meth:`Tokens.forget`); a read that gets no answer (the API server
unreachable) keeps the last token.

No ``kubernetes`` import: the reading function comes from the caller (:meth:`agn.kube.Kube.secret_data`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agn.kubeerrors import Forbidden, KubeError, NotFound

BEARER = "Bearer"
DEFAULT_TTL = 10.0  # seconds a token (or an error) read from a Secret is used before it is read again
MAX_TOKEN_BYTES = 8192

SECRET_NOT_FOUND = "SecretNotFound"
KEY_NOT_FOUND = "SecretKeyNotFound"
INVALID = "InvalidCredentials"
FORBIDDEN = "SecretForbidden"
UNREADABLE = "SecretUnreadable"
UNAUTHORIZED = "Unauthorized"  # the engine refused the token (HTTP 401) ...
REFUSED = "Forbidden"  # ... or refused the request (HTTP 403)


@dataclasses.dataclass(frozen=True, order=True)
class SecretRef:
    """The Secret key a provider's ``spec.authorization.credentials`` names (its namespace's)."""

    name: str
    key: str

    def to_dict(self) -> dict[str, Any]:
        """As ``spec.authorization`` and an overlay candidate's ``authorization`` hold it."""
        return {"type": BEARER, "credentials": {"name": self.name, "key": self.key}}

    @classmethod
    def from_dict(cls, data: object) -> SecretRef | None:
        """The reference in an ``authorization`` object; None when absent or not one (the CRD's
        schema keeps a stored object well-formed)."""
        creds = data.get("credentials") if isinstance(data, Mapping) else None
        if not isinstance(creds, Mapping) or not creds.get("name") or not creds.get("key"):
            return None
        return cls(str(creds["name"]), str(creds["key"]))

    def describe(self) -> str:
        return f"secret {self.name} key {self.key}"


def authorization_of(spec: Mapping[str, Any]) -> SecretRef | None:
    """A provider spec's ``authorization`` reference (None: it sends no credentials)."""
    return SecretRef.from_dict(spec.get("authorization"))


class CredentialsError(Exception):
    """The token of a :class:`SecretRef` cannot be had; ``reason`` is a status reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def refused_message(method_path: str, code: int, ref: SecretRef | None) -> tuple[str, str]:
    """(reason, message) for an engine's 401 or 403 answer to ``method_path`` ("GET /metrics")."""
    reason, words = (UNAUTHORIZED, "401 Unauthorized") if code == 401 else (REFUSED, f"{code} Forbidden")
    return reason, f"{method_path}: {words}; {refusal_hint(ref)}"


def refusal_hint(ref: SecretRef | None) -> str:
    """What to check when an engine refused a request: the Secret key the provider names (never
    its token), or that it names none."""
    if ref is None:
        return "the engine asks for credentials: set spec.authorization"
    return f"check spec.authorization.credentials {ref.describe()}"


def token_from(data: Mapping[str, bytes], ref: SecretRef) -> str:
    """The token under ``ref.key`` of a Secret's decoded ``data``; a :class:`CredentialsError`
    when the key is missing or its value cannot be a header's token (never quoting the value)."""
    if ref.key not in data:
        return _raise(KEY_NOT_FOUND, f"secret {ref.name} has no key {ref.key} (spec.authorization.credentials)")
    raw = data[ref.key]
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return _raise(INVALID, f"{ref.describe()}: the value is not UTF-8 text")
    if not token or len(raw) > MAX_TOKEN_BYTES or not token.isprintable():
        return _raise(
            INVALID, f"{ref.describe()}: the value must be 1 to {MAX_TOKEN_BYTES} bytes of printable characters"
        )
    return token


def _raise(reason: str, message: str) -> str:
    raise CredentialsError(reason, message)


def _read_error(exc: KubeError, ref: SecretRef) -> CredentialsError:
    if isinstance(exc, NotFound):
        return CredentialsError(SECRET_NOT_FOUND, f"secret {ref.name} not found (spec.authorization.credentials)")
    if isinstance(exc, Forbidden):
        return CredentialsError(
            FORBIDDEN, f"secret {ref.name}: reading it is forbidden to this component's identity (RBAC resourceNames)"
        )
    return CredentialsError(UNREADABLE, f"secret {ref.name}: cannot read it: {type(exc).__name__}")


SecretReader = Callable[[str], Mapping[str, bytes]]  # a Secret's name -> its decoded data


@dataclasses.dataclass
class _Entry:
    read_at: float
    token: str | None
    error: CredentialsError | None


class Tokens:
    """Tokens by :class:`SecretRef`, each read from its Secret at most once per ``ttl`` seconds
    (a failed read too, so a missing Secret is not asked for on every probe). Thread-safe; two
    callers that miss at once may both read."""

    def __init__(self, read: SecretReader, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self._read = read
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[SecretRef, _Entry] = {}
        self._sweep_at = clock() + ttl  # when expired entries are dropped next (refs no provider names any more)

    def _cached(self, ref: SecretRef) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(ref)
        return entry if entry is not None and self._clock() - entry.read_at < self._ttl else None

    def token(self, ref: SecretRef) -> str:
        """The token of ``ref`` (may block on one API request); a :class:`CredentialsError` else."""
        entry = self._cached(ref)
        if entry is None:
            at = self._clock()
            try:
                entry = _Entry(at, token_from(self._read(ref.name), ref), None)
            except CredentialsError as exc:
                entry = _Entry(at, None, exc)
            except KubeError as exc:
                entry = self._after_failed_read(ref, _read_error(exc, ref), at)
            with self._lock:
                self._entries[ref] = entry
                if at >= self._sweep_at:  # at most once a TTL, so the cache holds only what is in use
                    self._entries = {r: e for r, e in self._entries.items() if at - e.read_at < self._ttl}
                    self._sweep_at = at + self._ttl
        if entry.error is not None:
            raise CredentialsError(entry.error.reason, str(entry.error))
        assert entry.token is not None
        return entry.token

    def _after_failed_read(self, ref: SecretRef, error: CredentialsError, at: float) -> _Entry:
        """A read that got no answer about the Secret (the API server unreachable, a timeout)
        keeps the token last read, so a blip of the API server does not take every keyed
        provider out; a Secret that is gone or forbidden is believed at once."""
        with self._lock:
            last = self._entries.get(ref)
        if error.reason == UNREADABLE and last is not None and last.token is not None:
            return _Entry(at, last.token, None)
        return _Entry(at, None, error)

    async def token_async(self, ref: SecretRef) -> str:
        """:meth:`token` for an event loop: a cached answer at once, a read on a worker thread."""
        if self._cached(ref) is not None:
            return self.token(ref)
        import asyncio  # here, not at the top: the model imports this module on every drain's path

        return await asyncio.to_thread(self.token, ref)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def forget(self, ref: SecretRef) -> None:
        """Read ``ref`` again next time (the engine refused its token: it may have been rotated)."""
        with self._lock:
            self._entries.pop(ref, None)


def no_secrets(name: str) -> Mapping[str, bytes]:
    """A :data:`SecretReader` for components given no API access to Secrets (unit tests)."""
    raise Forbidden(f"secrets {name!r} is not readable here", status=403)


def bearer(token: str) -> dict[str, str]:
    """The request header that carries ``token``."""
    return {"Authorization": f"{BEARER} {token}"}
