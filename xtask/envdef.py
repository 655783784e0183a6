"""Environment definitions (``envs/<name>.yaml``): loading, validation, and rendering the
AGN objects they describe. Pure apart from reading the file; errors name the file and the
exact field that is wrong.

The same definition feeds every runtime: the local runtime fills provider endpoints with
the loopback ports of the fake providers it starts, the kind runtime with Service URLs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agn import GROUP, VERSION
from agn.inputfile import YAML_INPUT_LIMIT, read_regular
from agn.names import is_label
from agn.shards import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT
from agn.yamltext import YamlProblem, parse_yaml, show
from xtask.errors import EnvDefinitionError
from xtask.state import REPO_ROOT

# The container engines kind runs nodes on, and what an image reference may look like
# (registry/path:tag or @sha256:digest; no spaces, quotes or control characters).
KIND_ENGINES = ("docker", "podman")
IMAGE_REF = re.compile(r"[a-z0-9][A-Za-z0-9._\-/:]{0,254}(@sha256:[0-9a-f]{64})?")
ENVS_DIR = Path(os.environ.get("AGN_XTASK_ENVS_DIR") or (REPO_ROOT / "envs"))


@dataclasses.dataclass(frozen=True)
class ProviderDef:
    name: str
    provider_gateway: str | None
    selection_group: str
    rank: int
    labels: Mapping[str, str]
    endpoint: str | None  # set: an external provider, no fake is started for it


@dataclasses.dataclass(frozen=True)
class NetworkDef:
    name: str
    spec: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ConsumerDef:
    name: str
    network: str
    excluded_providers: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class EnvDef:
    name: str
    namespace: str
    networks: tuple[NetworkDef, ...]
    consumers: tuple[ConsumerDef, ...]
    providers: tuple[ProviderDef, ...]
    source: Path
    # Shards per consumer overlay: the operator's --overlay-shards and the shard names each
    # gateway's Role may read (they must agree, so both come from here).
    overlay_shards: int = DEFAULT_SHARD_COUNT
    # The kind runtime's pins (the env file's `kind:` section): its container engine and node
    # image; None leaves the choice to the runtime (docs/kind.md).
    kind_engine: str | None = None
    kind_node_image: str | None = None

    def provider_objects(self, endpoints: Mapping[str, str]) -> list[dict]:
        """InferenceProvider objects; ``endpoints`` gives the URL of each fake provider.

        The drain field is deliberately never rendered: applying an environment must not
        reset an administrator's drain.
        """
        out = []
        for p in self.providers:
            spec: dict[str, Any] = {
                "endpoint": p.endpoint or endpoints[p.name],
                "selectionGroup": p.selection_group,
                "rank": p.rank,
            }
            if p.provider_gateway:
                spec["providerGateway"] = p.provider_gateway
            out.append(_obj("InferenceProvider", p.name, self.namespace, spec, labels=dict(p.labels)))
        return out

    def network_objects(self) -> list[dict]:
        return [_obj("InferenceNetwork", n.name, self.namespace, dict(n.spec)) for n in self.networks]

    def consumer_objects(self) -> list[dict]:
        out = []
        for c in self.consumers:
            spec: dict[str, Any] = {"network": c.network}
            if c.excluded_providers:
                spec["excludedProviders"] = list(c.excluded_providers)
            out.append(_obj("InferenceConsumer", c.name, self.namespace, spec))
        return out


def _obj(kind: str, name: str, namespace: str, spec: dict, *, labels: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta, "spec": spec}


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


def endpoint_problem(value: Any) -> str | None:
    """Why ``value`` is not an http(s) URL with a host (and a valid port, if any), or None."""
    if not isinstance(value, str) or not value:
        return f"must be an http(s) URL, got {show(value)}"
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return f"must be an http(s) URL, got {value!r} ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"must be an http(s) URL, got {value!r} (scheme {parts.scheme or 'missing'!r})"
    if not parts.hostname:
        return f"must be an http(s) URL with a host, got {value!r}"
    if port == 0:
        return f"must be an http(s) URL with a usable port, got {value!r} (port 0)"
    return None


class _Checker:
    """Collects every problem in a definition so the user fixes them all in one go.

    Every message names the field and the value found; a missing required field is reported
    once ("is required") and its checks are skipped.
    """

    def __init__(self, source: Path) -> None:
        self.source = source
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{where or '(top level)'}: {message}")

    def mapping(self, value: Any, where: str, *, allowed: set[str], required: set[str]) -> dict | None:
        """``value`` if it is a mapping (unknown and missing keys reported), else None (reported)."""
        if not isinstance(value, dict):
            self.fail(where, f"must be a mapping, got {show(value)}")
            return None
        for key in sorted(set(value) - allowed, key=str):
            self.fail(f"{where}.{key}" if where else str(key), f"unknown field (allowed: {', '.join(sorted(allowed))})")
        for key in sorted(required - set(value)):
            self.fail(f"{where}.{key}" if where else key, "is required")
        return value

    def name(self, value: Any, where: str) -> str:
        if not is_label(value):
            self.fail(where, f"must be a DNS-1123 label (lowercase letters, digits, '-'), got {show(value)}")
            return ""
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"must be a non-empty string, got {show(value)}")
            return ""
        return value

    def items(self, value: Any, where: str, parse: Callable[[Any, str], Any]) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(where, f"must be a list, got {show(value)}")
            return []
        out = [o for o in (parse(item, f"{where}[{i}]") for i, item in enumerate(value)) if o is not None]
        names = [o.name for o in out if o.name]
        for n in sorted({n for n in names if names.count(n) > 1}):
            self.fail(where, f"duplicate name {n!r}")
        return out


def parse_env(data: Any, *, source: Path, expected_name: str | None = None) -> EnvDef:
    if data is None:
        raise EnvDefinitionError(
            f"{source}: the file is empty; it must define name, namespace, networks, consumers "
            "and providers (see envs/example.yaml)"
        )
    c = _Checker(source)
    top = c.mapping(
        data,
        "",
        allowed={"name", "namespace", "networks", "consumers", "providers", "overlayShards", "kind"},
        required={"name", "namespace", "networks", "consumers", "providers"},
    )
    if top is None:
        raise EnvDefinitionError(f"{source}: invalid environment definition: {c.problems[0]}")
    name = c.name(top["name"], "name") if "name" in top else ""
    if expected_name and name and name != expected_name:
        c.fail("name", f"is {name!r} but the file is for environment {expected_name!r}")
    namespace = c.name(top["namespace"], "namespace") if "namespace" in top else ""
    shards = top.get("overlayShards", DEFAULT_SHARD_COUNT)
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_SHARD_COUNT:
        c.fail("overlayShards", f"must be an integer from 1 to {MAX_SHARD_COUNT}, got {show(shards)}")
        shards = DEFAULT_SHARD_COUNT

    def network(item: Any, where: str) -> NetworkDef | None:
        m = c.mapping(
            item,
            where,
            allowed={"name", "providerSelector", "trust", "metricsMaxAgeSeconds", "probeIntervalSeconds"},
            required={"name"},
        )
        if m is None:
            return None
        age = m.get("metricsMaxAgeSeconds", 45)
        if not isinstance(age, int) or isinstance(age, bool) or age < 1:
            c.fail(f"{where}.metricsMaxAgeSeconds", f"must be a positive integer, got {show(age)}")
        if "probeIntervalSeconds" in m:
            every = m["probeIntervalSeconds"]
            if not isinstance(every, int | float) or isinstance(every, bool) or not 0.1 <= every < float("inf"):
                c.fail(f"{where}.probeIntervalSeconds", f"must be a number >= 0.1, got {show(every)}")
            elif isinstance(age, int) and not isinstance(age, bool) and every * 2 > age:
                c.fail(
                    f"{where}.probeIntervalSeconds",
                    f"must be at most half of metricsMaxAgeSeconds ({age}), got {show(every)}",
                )
        for key in ("providerSelector", "trust"):
            if key in m and not isinstance(m[key], dict):
                c.fail(f"{where}.{key}", f"must be a mapping, got {show(m[key])}")
        spec = {k: v for k, v in m.items() if k != "name"}
        return NetworkDef(c.name(m["name"], f"{where}.name") if "name" in m else "", spec)

    def consumer(item: Any, where: str) -> ConsumerDef | None:
        m = c.mapping(item, where, allowed={"name", "network", "excludedProviders"}, required={"name", "network"})
        if m is None:
            return None
        excluded = m.get("excludedProviders") or []
        if not isinstance(excluded, list):
            c.fail(f"{where}.excludedProviders", f"must be a list of provider names, got {show(excluded)}")
            excluded = []
        return ConsumerDef(
            c.name(m["name"], f"{where}.name") if "name" in m else "",
            c.string(m["network"], f"{where}.network") if "network" in m else "",
            tuple(c.name(e, f"{where}.excludedProviders[{i}]") for i, e in enumerate(excluded)),
        )

    def provider(item: Any, where: str) -> ProviderDef | None:
        m = c.mapping(
            item,
            where,
            allowed={"name", "providerGateway", "selectionGroup", "rank", "labels", "endpoint"},
            required={"name", "selectionGroup", "rank"},
        )
        if m is None:
            return None
        rank = m.get("rank", 0)
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            c.fail(f"{where}.rank", f"must be a non-negative integer, got {show(rank)}")
            rank = 0
        labels = m.get("labels") or {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            c.fail(f"{where}.labels", f"must map strings to strings, got {show(labels)}")
            labels = {}
        gateway = m.get("providerGateway")
        if gateway is not None:
            c.string(gateway, f"{where}.providerGateway")
        endpoint = m.get("endpoint")
        if endpoint is not None:
            problem = endpoint_problem(endpoint)
            if problem:
                c.fail(f"{where}.endpoint", problem)
        return ProviderDef(
            c.name(m["name"], f"{where}.name") if "name" in m else "",
            gateway,
            c.string(m["selectionGroup"], f"{where}.selectionGroup") if "selectionGroup" in m else "",
            rank,
            labels,
            endpoint,
        )

    kind_engine = kind_node_image = None
    if "kind" in top:
        k = c.mapping(top["kind"], "kind", allowed={"engine", "nodeImage"}, required=set())
        if k is not None:
            if "engine" in k:
                if k["engine"] in KIND_ENGINES:
                    kind_engine = k["engine"]
                else:
                    c.fail("kind.engine", f"must be one of {', '.join(KIND_ENGINES)}, got {show(k['engine'])}")
            if "nodeImage" in k:
                if isinstance(k["nodeImage"], str) and IMAGE_REF.fullmatch(k["nodeImage"]):
                    kind_node_image = k["nodeImage"]
                else:
                    c.fail("kind.nodeImage", f"must be an image reference, got {show(k['nodeImage'])}")

    networks = c.items(top.get("networks"), "networks", network)
    consumers = c.items(top.get("consumers"), "consumers", consumer)
    providers = c.items(top.get("providers"), "providers", provider)
    network_names = {n.name for n in networks}
    provider_names = {p.name for p in providers}
    for i, cons in enumerate(consumers):
        if cons.network and cons.network not in network_names:
            c.fail(
                f"consumers[{i}].network",
                f"names unknown network {cons.network!r} (known: {', '.join(sorted(network_names)) or 'none'})",
            )
        for e in cons.excluded_providers:
            if e and e not in provider_names:
                c.fail(f"consumers[{i}].excludedProviders", f"names unknown provider {e!r}")
    if c.problems:
        raise EnvDefinitionError(f"{source}: invalid environment definition:\n  " + "\n  ".join(c.problems))
    return EnvDef(
        name,
        namespace,
        tuple(networks),
        tuple(consumers),
        tuple(providers),
        source,
        shards,
        kind_engine=kind_engine,
        kind_node_image=kind_node_image,
    )
