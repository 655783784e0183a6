"""A drain journal's fields, written and read back: a provider's plan item (:func:`plan_item`)
and the :class:`~xtask.drain.core.changes.Change` it reads back as (:func:`change_from`), and the
checks every field read back passes. A journal is input a person may have edited: numbers JSON
allows but no journal holds (:class:`BadNumber`), names that go into request paths, and the
operation id that goes into annotations and Events are refused with a ValueError naming the
field; :mod:`xtask.drain.core.journal_records` names the file and the line.

Pure: records in, values out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from agn.names import label_problem, subdomain_problem
from agn.yamltext import show
from xtask.drain.core.changes import OUR_ANNOTATIONS, Change, with_owners
from xtask.drain.core.holds import is_hold_key

# Generations and HTTP statuses are Kubernetes int64s; nothing larger or non-finite is a journal's.
_MAX_COUNT = 2**63 - 1


class BadNumber(ValueError):
    """A number JSON allows but no journal holds: NaN, Infinity, or one out of range (1e400)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadNumber(f"the number {text} is out of range")
    return value


def _no_constant(text: str) -> float:
    raise BadNumber(f"{text} is not a number a journal may hold")


def loads(text: str) -> Any:
    """``json.loads`` refusing NaN, Infinity and numbers beyond a float (:class:`BadNumber`), and
    nesting too deep for the parser (ValueError instead of RecursionError)."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def is_json(line: str) -> bool:
    try:
        loads(line)
    except BadNumber:
        return True
    except ValueError:
        return False
    return True


def checked_count(value: Any, field: str) -> int:
    """A generation or status: ``int(value)`` (missing or null is 0), finite and in int64's range."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field} must be a whole number, got {value!r}")
    number = int(value or 0)
    if not 0 <= number <= _MAX_COUNT:
        raise ValueError(f"{field} must be between 0 and {_MAX_COUNT}, got {number}")
    return number


def plan_item(c: Change) -> dict[str, Any]:
    """One provider's item of the header's ``plan`` (or of a re-planned intent): what restoring
    it needs; :func:`change_from` reads it back."""
    item: dict[str, Any] = {
        "provider": c.provider,
        "previous": c.previous,
        "previousAnnotations": dict(c.previous_annotations),
        "resourceVersion": c.resource_version,
        "generation": c.generation,
    }
    if c.slow_start is not None:
        item["slowStart"] = c.slow_start
    if c.previous_slow_start is not None:
        item["previousSlowStart"] = dict(c.previous_slow_start)
    if c.session_deadline is not None:
        item["sessionDeadline"] = c.session_deadline
    if c.previous_session_deadline is not None:
        item["previousSessionDeadline"] = c.previous_session_deadline
    if c.hold_key is not None:
        item["holds"] = {
            "key": c.hold_key,
            "writes": dict(c.hold_writes),
            "keepDrain": c.keep_drain,
            "others": list(c.other_holds),
            "releaseAll": c.release_all,
        }
    return item


def change_from(provider: str, requested: bool, rec: Mapping[str, Any]) -> Change:
    """The :class:`Change` a plan item (:func:`plan_item`) records, each field checked."""
    annotations = rec.get("previousAnnotations") or {}
    if not isinstance(annotations, Mapping):
        raise ValueError("previousAnnotations must be an object")
    previous = rec.get("previous")
    if previous is not None and not isinstance(previous, bool):
        raise ValueError("previous must be true, false or null")
    holds = rec.get("holds") or {}
    if not isinstance(holds, Mapping):
        raise ValueError("holds must be an object")
    writes = holds.get("writes") or {}
    others = holds.get("others") or []
    if not isinstance(writes, Mapping) or not all(is_hold_key(k) and isinstance(v, bool) for k, v in writes.items()):
        raise ValueError("holds.writes must map hold annotation keys to true or false")
    if not isinstance(others, list) or not all(isinstance(k, str) and is_hold_key(k) for k in others):
        raise ValueError("holds.others must be a list of hold annotation keys")
    key = holds.get("key")
    if key is not None and not (isinstance(key, str) and is_hold_key(key)):
        raise ValueError("holds.key must be a hold annotation key")
    slow_start, previous_slow_start = _slow_start_from(rec)
    return Change(
        provider=provider,
        previous=previous,
        requested=requested,
        resource_version=str(rec.get("resourceVersion") or ""),
        generation=checked_count(rec.get("generation"), "generation"),
        previous_annotations={k: annotations.get(k) for k in (*OUR_ANNOTATIONS, *with_owners(writes))},
        hold_writes=dict(writes),
        keep_drain=holds.get("keepDrain") is True,
        other_holds=tuple(others),
        hold_key=key,
        release_all=holds.get("releaseAll") is True,
        slow_start=slow_start,
        previous_slow_start=previous_slow_start,
        session_deadline=_positive_int(rec.get("sessionDeadline"), "sessionDeadline"),
        previous_session_deadline=_optional_text(rec.get("previousSessionDeadline"), "previousSessionDeadline"),
    )


def _slow_start_from(rec: Mapping[str, Any]) -> tuple[int | None, Mapping[str, Any] | None]:
    """A plan item's ``slowStart`` (seconds) and ``previousSlowStart`` (the field as it was);
    absent in journals written before slow start: none, and nothing to put back."""
    seconds = rec.get("slowStart")
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0):
        raise ValueError(f"slowStart must be a positive whole number of seconds, got {seconds!r}")
    previous = rec.get("previousSlowStart")
    if previous is not None and not isinstance(previous, Mapping):
        raise ValueError("previousSlowStart must be an object")
    return seconds, previous


def _positive_int(value: Any, key: str) -> int | None:
    """A plan item's whole number of seconds (absent in older journals: None)."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"{key} must be a positive whole number of seconds, got {value!r}")
    return value


def _optional_text(value: Any, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def check_namespace(value: str, where: str) -> None:
    """A journal's namespace goes into request paths: ``..`` would reach another resource."""
    problem = label_problem(value)
    if problem:
        raise ValueError(f"{where} {problem}, got {show(value)}")


_OPERATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_header_words(operation: str, context: Any, where: str) -> None:
    """The operation id is written into providers' annotations and Events and decides which
    drains are this run's; a context is looked up in kubeconfigs. Ids xtask makes are tokens
    (``20261204T103745Z-a770f0``); a hand-edited one with control characters or spaces is not."""
    if not _OPERATION.fullmatch(operation):
        raise ValueError(
            f"{where}.operation must be a token of letters, digits, '.', '_' and '-', got {show(operation)}"
        )
    if isinstance(context, str) and not context.isprintable():  # its type: preflight.journal_context
        raise ValueError(f"{where}.context must be a printable string, got {show(context)}")


def check_provider_name(value: str, where: str) -> None:
    """A provider name goes into request paths: ``p/status`` would reach a subresource."""
    problem = subdomain_problem(value)
    if problem:
        raise ValueError(f"{where} names provider {show(value)}, which is not a provider name: it {problem}")


def selection_from(value: Any) -> list[str]:
    """``header.selection`` (a drain in waves): every provider selected, already-in-state ones too."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ValueError("header.selection must be a list of provider names")
    for name in value:
        check_provider_name(name, "header.selection")
    return list(value)


def waves_from(value: Any, planned: Collection[str]) -> list[list[str]]:
    """``header.waves``: a list of non-empty lists of provider names, each name once, every
    planned provider in one of them (a wave may also hold providers already in state)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(w, list) and w for w in value):
        raise ValueError("header.waves must be a list of non-empty lists of provider names")
    seen: set[str] = set()
    for wave in value:
        for name in wave:
            if not isinstance(name, str):
                raise ValueError("header.waves must be a list of non-empty lists of provider names")
            check_provider_name(name, "header.waves")
            if name in seen:
                raise ValueError(f"header.waves names provider {name} twice")
            seen.add(name)
    missing = sorted(set(planned) - seen)
    if missing:
        raise ValueError(f"header.waves leaves out planned provider(s) {', '.join(missing)}")
    return [list(w) for w in value]
