"""What an environment definition is (:class:`EnvDef`, as :mod:`xtask.envdef` loads it from
``envs/<name>.yaml``) and the AGN objects it describes. Pure: no file, no runtime; the runtimes
and the bring-up steps take an :class:`EnvDef` from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agn import GROUP, VERSION
from agn.shards import DEFAULT_SHARD_COUNT
from xtask.record import Record

# The Secret an engine with `apiKey: true` is reached with when the env file names none.
ENGINE_KEY_SUFFIX, ENGINE_KEY = "-api-key", "token"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class EngineDef(Record):
    """A real inference engine the local runtime starts for a provider (``engine:`` in the file)."""

    kind: str  # its metrics format too (agn/engines.py): "llamacpp"
    slots: int = 2  # requests generated at once
    # The runtime generates a key, hands it to the engine in a file and to the provider through a
    # Secret (the provider's authorization, named by default `<provider>-api-key`, key `token`).
    api_key: bool = False


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ProviderDef(Record):
    name: str
    provider_gateway: str | None
    selection_group: str
    rank: int
    labels: Mapping[str, str]
    endpoint: str | None  # set: an external provider, no fake is started for it
    # spec.authorization as the env file gives it (agn.credentials): a Secret reference only.
    authorization: Mapping[str, Any] | None = None
    engine: EngineDef | None = None  # set: served by a real engine, no fake is started for it


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class NetworkDef(Record):
    name: str
    spec: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ConsumerDef(Record):
    name: str
    network: str
    excluded_providers: tuple[str, ...]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class EnvDef(Record):
    name: str
    namespace: str
    networks: tuple[NetworkDef, ...]
    consumers: tuple[ConsumerDef, ...]
    providers: tuple[ProviderDef, ...]
    source: Path
    # Shards per consumer overlay: the operator's --overlay-shards and the shard names each
    # gateway's Role may read (they must agree, so both come from here).
    overlay_shards: int = DEFAULT_SHARD_COUNT
    # The runtimes' sections of the file (`kind:`), checked against their declared schemas; each
    # runtime reads its own with `section`.
    sections: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def section(self, key: str) -> Mapping[str, Any]:
        """The env file's section ``key`` (empty when the file has none)."""
        return self.sections.get(key) or {}

    def provider_objects(self, endpoints: Mapping[str, str]) -> list[dict]:
        """InferenceProvider objects; ``endpoints`` gives the URL of each fake provider and engine.
        An engine's provider pins its metrics format (the engine's kind).

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
            if p.authorization:
                spec["authorization"] = {"type": "Bearer", **p.authorization}
            if p.engine is not None:
                spec["metrics"] = {"format": p.engine.kind}
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
