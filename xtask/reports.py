"""The JSON reports of ``--output json``: one envelope, one key style, one schema per kind.

Every report is an object with ``apiVersion`` and ``kind`` first (as Kubernetes objects have),
then camelCase keys. Each kind is described by a JSON Schema in ``schemas/`` (file name in
:data:`SCHEMA_FILES`); the test suite validates every report it produces against it, so a
field cannot be renamed or dropped without the schema (and its version) changing too.
Map keys that are object names (providers, consumers) are data, not fields, and are left as
they are.
"""

from __future__ import annotations

from typing import Any

from xtask.errors import ExitCode

API_VERSION = "xtask.agn.dev/v1alpha1"

PROVIDER_DRAIN = "ProviderDrainReport"
DRAIN_RESTORE = "DrainRestoreReport"
ENV_STATUS = "EnvStatusReport"
ENV_UP = "EnvUpReport"
ENV_DOWN = "EnvDownReport"
ENV_DRAINS = "EnvDrainsReport"
PROVIDER_DRAIN_PLAN = "ProviderDrainPlan"  # not a report: the plan file of --plan-out (xtask.drain.edges.planfile)

SCHEMA_FILES = {
    PROVIDER_DRAIN: "provider-drain-report.schema.json",
    DRAIN_RESTORE: "drain-restore-report.schema.json",
    ENV_STATUS: "env-status-report.schema.json",
    ENV_UP: "env-up-report.schema.json",
    ENV_DOWN: "env-down-report.schema.json",
    ENV_DRAINS: "env-drains-report.schema.json",
    PROVIDER_DRAIN_PLAN: "provider-drain-plan.schema.json",
}


def envelope(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` under the report's ``apiVersion`` and ``kind``."""
    if kind not in SCHEMA_FILES:
        raise ValueError(f"unknown report kind {kind!r}")
    return {"apiVersion": API_VERSION, "kind": kind, **body}


def exit_status(code: ExitCode) -> dict[str, Any]:
    """The ``exit`` field: the process's exit status and its documented name."""
    return {"code": int(code), "name": code.label}
