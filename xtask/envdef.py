"""Environment definitions (``envs/<name>.yaml``): loading, validation, and rendering the
AGN objects they describe. Pure apart from reading the file; errors name the file and the
exact field that is wrong.

What a file may hold is ``schemas/env.schema.json`` plus the section each runtime declares
(:attr:`xtask.runtime.base.Runtime.section`), checked by :mod:`xtask.envschema`; here are only
the rules one schema cannot state (unique names, references between lists, the CRD's
probe-interval rule, the file's own name). This module names no runtime and no runtime's keys.

The same definition feeds every runtime: the local runtime fills provider endpoints with
the loopback ports of the fake providers it starts, the kind runtime with Service URLs.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agn.inputfile import YAML_INPUT_LIMIT, read_regular
from agn.names import is_label
from agn.shards import DEFAULT_SHARD_COUNT
from agn.yamltext import YamlProblem, parse_yaml, show
from xtask import envschema
from xtask.crds import spec_default
from xtask.envmodel import ENGINE_KEY, ENGINE_KEY_SUFFIX, ConsumerDef, EngineDef, EnvDef, NetworkDef, ProviderDef
from xtask.errors import EnvDefinitionError, ExitCode
from xtask.resources import data_dir
from xtask.runtime import registry

__all__ = [
    "ENVS_DIR",
    "ConsumerDef",
    "EngineDef",
    "EnvDef",
    "NetworkDef",
    "ProviderDef",
    "available_envs",
    "env_path",
    "load_env",
    "parse_env",
]

API_VERSION = "xtask.agn.dev/v1alpha1"
KIND = "Environment"


class EnvVersionError(EnvDefinitionError):
    """An env file of another apiVersion or kind: a usage error (exit 2)."""

    exit_code = ExitCode.USAGE


ENVS_DIR = Path(os.environ.get("AGN_XTASK_ENVS_DIR") or data_dir("envs"))


def available_envs(envs_dir: Path = ENVS_DIR) -> list[str]:
    return sorted(p.stem for p in envs_dir.glob("*.yaml") if not p.name.startswith("kind"))


def env_path(name: str, envs_dir: Path = ENVS_DIR) -> Path:
    if not is_label(name):
        raise EnvDefinitionError(
            f"invalid environment name {show(name)}: use lowercase letters, digits and '-' (at most 63)"
        )
    path = envs_dir / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(available_envs(envs_dir)) or "none"
        raise EnvDefinitionError(f"unknown environment {name!r}: no file {path}", hint=f"known environments: {known}")
    return path


def load_env(name: str, *, envs_dir: Path = ENVS_DIR) -> EnvDef:
    path = env_path(name, envs_dir)
    try:
        data = parse_yaml(read_regular(path, limit=YAML_INPUT_LIMIT))
    except FileNotFoundError as exc:
        raise EnvDefinitionError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except OSError as exc:  # InputFileError: a FIFO, a device, a directory, too large
        raise EnvDefinitionError(f"{path}: {exc}") from exc
    except YamlProblem as exc:
        raise EnvDefinitionError(f"{path}: {exc}") from exc
    return parse_env(data, source=path, expected_name=name)


def parse_env(data: Any, *, source: Path, expected_name: str | None = None) -> EnvDef:
    """The definition in ``data`` (a parsed env file); every problem found, raised together."""
    if data is None:
        raise EnvDefinitionError(
            f"{source}: the file is empty; it must define name, namespace, networks, consumers "
            "and providers (see envs/example.yaml)"
        )
    versioned = _check_version(data, source)
    sections = registry.sections()
    schema = envschema.env_schema(((s.key, s.schema) for s in sections), versioned=versioned)
    found = envschema.problems(data, schema)
    if not isinstance(data, dict):
        path, message = found[0]
        raise EnvDefinitionError(f"{source}: invalid environment definition: {envschema.where(path)}: {message}")
    problems = [f"{envschema.where(path)}: {message}" for path, message in found]
    problems += _rule_problems(data, {path for path, _ in found}, expected_name=expected_name)
    if problems:
        raise EnvDefinitionError(f"{source}: invalid environment definition:\n  " + "\n  ".join(problems))
    holder = (data.get("runtimes") or {}) if versioned else data
    return EnvDef(
        data["name"],
        data["namespace"],
        tuple(NetworkDef(n["name"], {k: v for k, v in n.items() if k != "name"}) for n in data["networks"] or ()),
        tuple(
            ConsumerDef(c["name"], c["network"], tuple(c.get("excludedProviders") or ()))
            for c in data["consumers"] or ()
        ),
        tuple(
            ProviderDef(
                p["name"],
                p.get("providerGateway"),
                p["selectionGroup"],
                p["rank"],
                p.get("labels") or {},
                p.get("endpoint"),
                p.get("authorization") or _engine_authorization(p),
                _engine(p.get("engine")),
            )
            for p in data["providers"] or ()
        ),
        source,
        data.get("overlayShards", DEFAULT_SHARD_COUNT),
        sections={s.key: holder[s.key] for s in sections if s.key in holder},
    )


def _engine(entry: dict | None) -> EngineDef | None:
    if not entry:
        return None
    return EngineDef(entry["kind"], entry.get("slots", 2), bool(entry.get("apiKey", False)))


def _engine_authorization(provider: dict) -> dict | None:
    """The Secret an engine with ``apiKey: true`` is reached with, when the file names none:
    ``<provider>-api-key``, key ``token`` (the runtime creates it, docs/engines.md)."""
    if not (provider.get("engine") or {}).get("apiKey"):
        return None
    return {"credentials": {"name": f"{provider['name']}{ENGINE_KEY_SUFFIX}", "key": ENGINE_KEY}}


def _check_version(data: Any, source: Path) -> bool:
    """Whether ``data`` is a versioned env file (``apiVersion`` and ``kind: Environment``). A file
    with neither loads as before, with a one-line deprecation warning on stderr (once per file);
    a wrong or half-given version is a usage error (exit 2) naming the field and value."""
    if not isinstance(data, dict):
        return True
    version, kind = data.get("apiVersion"), data.get("kind")
    if "apiVersion" not in data and ("kind" not in data or isinstance(kind, dict)):
        _warn_unversioned(str(source))
        return False
    wrong = [
        f"{field}: must be {want}, got {show(value) if field in data else '(missing)'}"
        for field, want, value in (("apiVersion", API_VERSION, version), ("kind", KIND, kind))
        if value != want
    ]
    if wrong:
        raise EnvVersionError(
            f"{source}: not an environment definition of this xtask: " + "; ".join(wrong),
            hint=f"an env file starts with `apiVersion: {API_VERSION}` and `kind: {KIND}` (docs/environments.md)",
        )
    return True


@functools.cache
def _warn_unversioned(source: str) -> None:
    print(
        f"warning: {source}: no apiVersion/kind; unversioned env files are deprecated: "
        f"add `apiVersion: {API_VERSION}` and `kind: {KIND}` (runtime sections go under `runtimes:`)",
        file=sys.stderr,
    )


@functools.cache
def default_metrics_max_age() -> int:
    """What the API server fills in for a network without ``metricsMaxAgeSeconds`` (the CRD's default)."""
    return int(spec_default("InferenceNetwork", "metricsMaxAgeSeconds"))


def _rule_problems(data: dict, bad: set[envschema.Path_], *, expected_name: str | None) -> list[str]:
    """The rules the schema cannot state, over the fields that passed it (a bad field is reported
    once, by the schema)."""

    def ok(*path: str | int) -> bool:
        return not any(b[: len(path)] == path for b in bad)

    problems: list[str] = []
    if expected_name and ok("name") and data["name"] != expected_name:
        problems.append(f"name: is {data['name']!r} but the file is for environment {expected_name!r}")
    names: dict[str, list[str]] = {}
    for key in ("networks", "consumers", "providers"):
        items = _listed(data, key)
        listed = [m["name"] for i, m in enumerate(items) if isinstance(m, dict) and "name" in m and ok(key, i, "name")]
        problems += [f"{key}: duplicate name {n!r}" for n, count in sorted(Counter(listed).items()) if count > 1]
        names[key] = listed
    for i, net in enumerate(_listed(data, "networks")):
        if isinstance(net, dict) and "probeIntervalSeconds" in net and ok("networks", i, "probeIntervalSeconds"):
            if not ok("networks", i, "metricsMaxAgeSeconds"):
                continue
            age = net.get("metricsMaxAgeSeconds", default_metrics_max_age())
            if net["probeIntervalSeconds"] * 2 > age:  # the CRD's CEL rule, checked before anything is applied
                problems.append(
                    f"networks[{i}].probeIntervalSeconds: must be at most half of metricsMaxAgeSeconds ({age}), "
                    f"got {show(net['probeIntervalSeconds'])}"
                )
    for i, prov in enumerate(_listed(data, "providers")):
        if isinstance(prov, dict) and prov.get("endpoint") and prov.get("engine") and ok("providers", i, "engine"):
            problems.append(f"providers[{i}]: has both endpoint and engine; an engine's endpoint is the one it serves")
        engine = prov.get("engine") if isinstance(prov, dict) else None
        if isinstance(engine, dict) and prov.get("authorization") and not engine.get("apiKey") and ok("providers", i):
            problems.append(
                f"providers[{i}]: has authorization but its engine no apiKey; set engine.apiKey: true "
                "(the runtime starts the engine with the key the Secret holds)"
            )
    for i, cons in enumerate(_listed(data, "consumers")):
        if not isinstance(cons, dict):
            continue
        if "network" in cons and ok("consumers", i, "network") and cons["network"] not in names["networks"]:
            known = ", ".join(sorted(set(names["networks"]))) or "none"
            problems.append(f"consumers[{i}].network: names unknown network {cons['network']!r} (known: {known})")
        for j, excluded in enumerate(_listed(cons, "excludedProviders")):
            if ok("consumers", i, "excludedProviders", j) and excluded not in names["providers"]:
                problems.append(f"consumers[{i}].excludedProviders: names unknown provider {excluded!r}")
    return problems


def _listed(data: dict, key: str) -> list:
    value = data.get(key)
    return value if isinstance(value, list) else []
