"""Kubernetes name rules, checked once where a name enters: flags, env files, journals.

A namespace is a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and
ending with a letter or digit); an object name (providers, consumers, networks) is a DNS-1123
subdomain (labels joined by '.', at most 253 characters), as the API server checks them. The
patterns are matched against the whole string (``fullmatch``): ``$`` would also accept a
trailing newline. A name that passes is also a safe URL path segment (no '/', '%', '.' or
'..'), so a request built from it cannot reach another resource or a subresource.

Pure: no I/O. The functions say what is wrong (``None`` when nothing is), so each caller
raises its own error type (usage error, env file problem, bad journal).
"""

from __future__ import annotations

import re
from typing import Any

LABEL_MAX = 63
SUBDOMAIN_MAX = 253

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")

LABEL_RULE = (
    f"lowercase letters, digits and '-', starting and ending with a letter or digit, at most {LABEL_MAX} characters"
)
SUBDOMAIN_RULE = f"lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most {SUBDOMAIN_MAX} characters"


def is_label(value: Any) -> bool:
    """Whether ``value`` is a DNS-1123 label (a namespace, an env name)."""
    return isinstance(value, str) and len(value) <= LABEL_MAX and _LABEL_RE.fullmatch(value) is not None


def is_subdomain(value: Any) -> bool:
    """Whether ``value`` is a DNS-1123 subdomain (the name of most Kubernetes objects)."""
    return isinstance(value, str) and len(value) <= SUBDOMAIN_MAX and _SUBDOMAIN_RE.fullmatch(value) is not None


def label_problem(value: Any) -> str | None:
    """Why ``value`` is not a DNS-1123 label, or None."""
    return None if is_label(value) else f"must be a DNS-1123 label ({LABEL_RULE})"


def subdomain_problem(value: Any) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain, or None."""
    return None if is_subdomain(value) else f"must be a DNS-1123 subdomain ({SUBDOMAIN_RULE})"
