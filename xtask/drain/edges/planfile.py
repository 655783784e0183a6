"""Drain plans you can review: ``provider-drain --plan-out FILE`` writes one, ``--plan FILE``
applies exactly it (docs/provider-drain.md, "Plans"; schema:
``schemas/provider-drain-plan.schema.json``).

A plan (``xtask.agn.dev/v1alpha1``, ``ProviderDrainPlan``) records what the read-only steps of
a run saw and decided: the selection with each provider's resourceVersion, drain and holders,
the operation, the targets, each selection group's admitted count before and after, the
budget and the waves. ``metadata.digest`` is a SHA-256 over everything else, canonically
serialised, so an edited plan is refused, its creation time included.

Pure apart from :func:`write_plan` and :func:`load_plan` (one file each). The checks here
decide; the run reads the cluster and calls them. Nothing here talks to the API server.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agn.inputfile import YAML_INPUT_LIMIT, read_regular
from agn.objects import parse_time, rfc3339
from agn.outputfile import write_atomic
from agn.yamltext import YamlProblem, parse_yaml, show
from xtask.drain.core.amounts import Amount
from xtask.drain.core.changes import raw_drain
from xtask.drain.core.holds import holds_of
from xtask.drain.core.plandoc import PACING_FLAGS, LoadedPlan, pacing_doc, planned_arguments
from xtask.drain.core.request import DrainRequest
from xtask.drain.gates import gate_flags
from xtask.errors import RefusedError, UsageError
from xtask.record import Record
from xtask.reports import API_VERSION, PROVIDER_DRAIN_PLAN
from xtask.resources import data_dir

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError

KIND = PROVIDER_DRAIN_PLAN
DEFAULT_MAX_AGE = 3600.0
FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


class PlanError(RefusedError):
    """A file that is not a usable plan, or a plan that no longer matches the cluster (exit 3)."""


def plan_format(path: Path) -> str:
    """``json`` or ``yaml``, from the file name's extension; a usage error for any other."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"--plan-out {show(str(path), limit=400)}: name a .yaml, .yml or .json file (the extension picks the format)"
        )
    return fmt


# -- making a plan ---------------------------------------------------------------------------------
def selection_entry(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "resourceVersion": str(meta.get("resourceVersion", "")),
        "generation": int(meta.get("generation") or 0),
        "drain": raw_drain(obj),
        "holders": holds_of(obj),
        "labels": dict(meta.get("labels") or {}),
    }


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class PlanInputs(Record):
    """What a plan records: who made it when, where, what was asked, and what the read-only
    steps saw and decided."""

    created_at: float
    created_by: str
    context: str | None
    cluster: str
    namespace: str
    request: DrainRequest
    selected: Iterable[Mapping[str, Any]]
    to_change: Sequence[str]
    groups: Sequence[Mapping[str, Any]]
    budget: Sequence[Mapping[str, Any]]
    capacity: Sequence[Mapping[str, Any]] | None = None  # the capacity guard's groups (None: a drain it did not weigh)
    waves: Sequence[Sequence[str]]


def build_plan(inputs: PlanInputs) -> dict[str, Any]:
    """The plan document, its digest included."""
    req = inputs.request
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "createdAt": rfc3339(inputs.created_at),
            "createdBy": inputs.created_by,
            "context": inputs.context,
            "cluster": inputs.cluster,
            "namespace": inputs.namespace,
            "arguments": planned_arguments(req),
        },
        "spec": {
            "selector": {"provider": req.selector.provider, "gateway": req.selector.gateway},
            "operation": {
                "request": "drain" if req.drain else "undrain",
                "reason": req.reason,
                "force": req.force,
                # --slow-start (undrain): written only when given, so earlier plans read the same.
                **({"slowStartSeconds": req.slow_start} if req.slow_start is not None else {}),
                **({"sessionDeadlineSeconds": req.session_deadline} if req.session_deadline is not None else {}),
            },
            "selection": [selection_entry(o) for o in inputs.selected],
            "changes": list(inputs.to_change),
            "targets": {"network": req.network, "consumers": list(req.consumers)},
            "groups": [dict(g) for g in inputs.groups],
            "budget": None
            if req.max_unavailable is None
            else {"maxUnavailable": str(req.max_unavailable), "groups": [dict(b) for b in inputs.budget]},
            "capacity": None
            if inputs.capacity is None
            else {
                "margin": None if req.capacity_margin is None else str(req.capacity_margin),
                "groups": [dict(g) for g in inputs.capacity],
            },
            "waves": {
                "size": None if req.wave_size is None else str(req.wave_size),
                "waves": [list(w) for w in inputs.waves],
            },
            "hold": {
                "holder": req.hold_holder,
                "ticket": req.ticket,
                "expiresIn": req.expires_in,
                "releaseAll": req.release_all,
            },
            "pacing": pacing_doc(req),
        },
    }
    doc["metadata"]["digest"] = plan_digest(doc)
    return doc


def plan_digest(doc: Mapping[str, Any]) -> str:
    """SHA-256 of the plan without ``metadata.digest``, as canonical JSON (sorted keys, no spaces)."""
    body = {k: v for k, v in doc.items() if k != "metadata"}
    body["metadata"] = {k: v for k, v in (doc.get("metadata") or {}).items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def render_plan(doc: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True)


def write_plan(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` to ``path`` as kubectl writes files (:func:`agn.outputfile.write_atomic`:
    a new file in the same folder renamed over the target, mode 0600, no symlink followed)."""
    try:
        write_atomic(path, render_plan(doc, plan_format(path)))
    except OSError as exc:
        raise PlanError(f"cannot write the plan {path}: {exc.strerror or exc}") from exc


# -- reading a plan --------------------------------------------------------------------------------
def load_plan(path: Path) -> LoadedPlan:
    """The plan in ``path``: a regular file, YAML or JSON, of the plan's shape, its digest intact.
    Anything else is a :class:`PlanError` naming the file and the first problem."""
    try:
        raw = read_regular(path, limit=YAML_INPUT_LIMIT)
    except OSError as exc:
        raise PlanError(f"plan {path}: {exc.strerror or exc}") from exc
    try:
        doc = parse_yaml(raw)
    except YamlProblem as exc:
        raise PlanError(f"plan {path}: not a plan: {exc}") from exc
    problems = plan_problems(doc)
    if problems:
        raise PlanError(f"plan {path}: not a valid {KIND}: " + "; ".join(problems[:5]))
    digest = plan_digest(doc)
    if doc["metadata"]["digest"] != digest:
        raise PlanError(
            f"plan {path}: its digest does not match its content (written {doc['metadata']['digest']}, "
            f"content {digest}): it was changed after it was made",
            hint="make a new plan with --plan-out",
        )
    return LoadedPlan(path, doc)


# -- the plan's shape: schemas/provider-drain-plan.schema.json ---------------------------------------
SCHEMA_FILE = data_dir("schemas") / "provider-drain-plan.schema.json"
_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "a list",
    "object": "a mapping",
}


@functools.cache
def _validator() -> Draft202012Validator:
    # jsonschema loads only when a plan is read (a drain without --plan does not pay for it).
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def _where(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _worded(error: ValidationError) -> list[tuple[int, str]]:
    """One schema error as (rank, message naming the field): what is missing first, unknown
    fields last, as the file is read."""
    path = list(error.absolute_path)
    where = _where(path) or "(top level)"
    kind, value = error.validator, error.instance
    if kind == "required":
        return [(0, f"{_where([*path, key])} is required") for key in error.validator_value if key not in value]
    if kind == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        return [(2, f"{_where([*path, key])}: unknown field") for key in value if key not in known]
    if kind in ("const", "enum"):
        allowed = [error.validator_value] if kind == "const" else list(error.validator_value)
        return [(1, f"{where} must be one of {', '.join(map(str, allowed))}, got {show(value)}")]
    if kind == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        words = " or ".join(_TYPE_WORDS.get(str(t), str(t)) for t in types)
        return [(1, f"{where} must be {words}, got {show(value)}")]
    must = error.schema.get("x-must")
    return [(1, f"{where} must {must}, got {show(value)}" if must else f"{where}: {error.message}")]


def plan_problems(doc: Any) -> list[str]:
    """What makes ``doc`` not a plan (empty: it is one), each naming the field: its JSON Schema,
    then what the schema cannot say (times and amounts that parse, exactly one selector)."""
    found = sorted(
        (rank, index, message)
        for index, error in enumerate(_validator().iter_errors(doc))
        for rank, message in _worded(error)
    )
    if found:
        return [message for _, _, message in found]
    problems = []
    if parse_time(doc["metadata"]["createdAt"]) is None:
        problems.append(f"metadata.createdAt must be an RFC 3339 time, got {show(doc['metadata']['createdAt'])}")
    for where, amount in (
        ("spec.waves.size", doc["spec"]["waves"]["size"]),
        ("spec.budget.maxUnavailable", (doc["spec"]["budget"] or {}).get("maxUnavailable")),
    ):
        try:
            if amount is not None:
                Amount.parse(amount)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    selector = doc["spec"]["selector"]
    if (selector["provider"] is None) == (selector["gateway"] is None):
        problems.append("spec.selector must name exactly one of provider and gateway")
    return problems + gate_problems((doc["spec"].get("pacing") or {}).get("gates") or {})


def gate_problems(gates: Mapping[str, Any]) -> list[str]:
    """What is wrong with a plan's ``spec.pacing.gates``: a field no wave gate declares, or a
    value its flag would not take on the command line (checked by the flag's own type)."""
    flags = {f.field: f for f in PACING_FLAGS if f.gate}
    types = {f.key: f.type for f in gate_flags()}
    problems = []
    for field, value in gates.items():
        where = f"spec.pacing.gates.{field}"
        if field not in flags:
            problems.append(f"{where}: unknown field (no wave gate takes it)")
            continue
        flag = flags[field]
        values = value if isinstance(value, list) else [] if value is None else [value]
        if isinstance(value, list) != (flag.unset == ()):
            problems.append(
                f"{where} must be {'a list' if flag.unset == () else 'one value or null'}, got {show(value)}"
            )
            continue
        for one in values:
            kind = types[flag.key]
            try:
                if isinstance(one, bool) or (kind is None and not isinstance(one, str)):
                    raise click.BadParameter(f"{show(one)} is not a value of {flag.flag}")
                if kind is not None:
                    kind.convert(one, None, None)
            except click.BadParameter as exc:
                problems.append(f"{where} ({flag.flag}): {exc.message}")
    return problems


# -- checking a plan against the cluster -------------------------------------------------------------
def plan_differences(
    plan: LoadedPlan,
    selected: Iterable[Mapping[str, Any]],
    *,
    cluster: str,
    namespace: str,
    now: float,
    max_age: float,
) -> list[str]:
    """Why the plan no longer describes the cluster (empty: apply it), each difference named:
    another cluster or namespace, older than ``max_age`` seconds, a provider that joined or
    left the selection, a provider whose resourceVersion changed."""
    meta = plan.doc["metadata"]
    out = []
    if meta["cluster"] != cluster:
        out.append(f"the plan is for cluster {meta['cluster']}, this context's is {cluster}")
    if meta["namespace"] != namespace:
        out.append(f"the plan is for namespace {meta['namespace']}, not {namespace}")
    created = parse_time(meta["createdAt"])
    assert created is not None  # checked by plan_problems
    age = now - created
    if age > max_age:
        out.append(
            f"the plan is {_seconds(age)} old (made {meta['createdAt']}), older than --max-plan-age {_seconds(max_age)}"
        )
    planned = {e["name"]: e for e in plan.spec["selection"]}
    current = {str((o.get("metadata") or {}).get("name", "")): o for o in selected}
    for name in sorted(set(current) - set(planned)):
        out.append(f"provider {name} joined the selection since the plan was made")
    for name in sorted(set(planned) - set(current)):
        out.append(f"provider {name} left the selection since the plan was made")
    for name in sorted(set(planned) & set(current)):
        was, meta_now = planned[name], current[name].get("metadata") or {}
        if str(meta_now.get("uid", "")) != was["uid"]:
            out.append(f"provider {name} was deleted and created again since the plan was made (uid {was['uid']})")
        elif str(meta_now.get("resourceVersion", "")) != was["resourceVersion"]:
            what = _what_changed(was, current[name])
            if what is not None:
                out.append(
                    f"provider {name} changed since the plan was made ({what}: resourceVersion "
                    f"{was['resourceVersion']} -> {meta_now.get('resourceVersion')})"
                )
    return out


def _what_changed(was: Mapping[str, Any], obj: Mapping[str, Any]) -> str | None:
    """What of a provider a plan depends on changed since it was read (None: only its status, or
    metadata the plan does not depend on — the operator's load readings never make a plan
    stale): its spec (the generation), its drain holds, or its labels (which networks select it)."""
    meta = obj.get("metadata") or {}
    if int(meta.get("generation") or 0) != was["generation"]:
        return "its spec"
    if holds_of(obj) != was["holders"]:
        return "its drain holds"
    if "labels" in was and dict(meta.get("labels") or {}) != was["labels"]:
        return "its labels"
    return None


def _seconds(value: float) -> str:
    value = max(0.0, value)
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:.0f}h"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:.0f}m"
    return f"{value:.0f}s" if value >= 10 else f"{value:.1f}s"
