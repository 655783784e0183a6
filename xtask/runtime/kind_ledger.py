"""What a kind env added to its container engine, kept so ``down`` removes that and nothing else.

The ledger is ``kind.json`` in the env's state folder: the engine the nodes run on
(``engine``), the node image the cluster was made from (``nodeImage``), whether this env made
the ``kind`` network (``createdNetwork``) and the images it built or loaded (``createdImages``).
:meth:`KindLedger.remove_leftovers` removes the network (once no cluster uses it) and those
images. Every engine call goes through the runtime's :class:`xtask.procs.CmdRunner`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agn.outputfile import write_atomic
from xtask.procs import CmdRunner
from xtask.runtime.kind_host import remove_images
from xtask.state import claim_env_dir, env_dir

LEDGER_FILE = "kind.json"
KIND_NETWORK = "kind"  # the engine network kind attaches every node to (and never deletes)


class KindLedger:
    """The record of one env's additions to its engine, and their removal."""

    def __init__(self, env: str, runner: CmdRunner) -> None:
        self.env = env
        self.runner = runner

    def read(self) -> dict:
        """The ledger as written (empty when there is none, or it is not a JSON object)."""
        try:
            data = json.loads((env_dir(self.env) / LEDGER_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def note(self, **changes: Any) -> None:
        """Record ``changes`` (claiming the env's state folder), atomically."""
        entries = {**self.read(), **changes}
        write_atomic(claim_env_dir(self.env) / LEDGER_FILE, json.dumps(entries, indent=2, sort_keys=True))

    def image_ids(self, cli: str) -> set[str]:
        """Every image id the engine holds, intermediate ones included."""
        out = self.runner.run([cli, "images", "-a", "-q", "--no-trunc"], check=False, timeout=60).stdout
        return set(out.split())

    def note_new_images(self, cli: str, before: set[str]) -> None:
        """Record the images that appeared since ``before``: ``down`` removes what this env made."""
        new = self.image_ids(cli) - before
        if new:
            self.note(createdImages=sorted({*self.read().get("createdImages", []), *new}))

    def engine_has(self, cli: str, kind: str, name: str) -> bool:
        """Whether the engine has the network (``kind="network"``) or image ``name``."""
        argv = [cli, kind, "inspect", name] if kind == "network" else [cli, "image", "inspect", name]
        return self.runner.run(argv, check=False, timeout=60).returncode == 0

    def remove_leftovers(self, cli: str | None, *, clusters: Callable[[], list[str]], errors: list[str]) -> list[str]:
        """Remove the ``kind`` network if this env made it and no cluster (``clusters()``) is left,
        and the images it made; what was removed, with each failure appended to ``errors``."""
        entries = self.read()
        cli = entries.get("engine") or cli
        removed: list[str] = []
        if cli not in ("docker", "podman"):
            return removed
        if entries.get("createdNetwork") and not clusters():
            res = self.runner.run([cli, "network", "rm", KIND_NETWORK], check=False, timeout=60)
            if res.returncode == 0:
                removed.append(f"{cli} network {KIND_NETWORK}")
            elif self.engine_has(cli, "network", KIND_NETWORK):
                errors.append(f"{cli} network rm {KIND_NETWORK}: {(res.stderr or res.stdout).strip()[-300:]}")
        images = [i for i in entries.get("createdImages") or [] if isinstance(i, str)]
        removed.extend(remove_images(self.runner, cli, images))
        return removed
