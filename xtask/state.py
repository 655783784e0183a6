"""Where environments keep their state, and the small record that says how one was brought up.

Each environment has one folder (git-ignored): ``$AGN_XTASK_HOME/envs/<env>/``, by default
``<repo>/.xtask/envs/<env>/``, holding certificates, etcd data, pid files, logs and
``env.json`` (runtime, context, kubeconfig, namespace).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # the one definition; others import it


def state_root() -> Path:
    return Path(os.environ.get("AGN_XTASK_HOME") or (REPO_ROOT / ".xtask"))


def env_dir(env: str) -> Path:
    return state_root() / "envs" / env


@dataclasses.dataclass(frozen=True)
class EnvRecord:
    env: str
    runtime: str
    context: str
    kubeconfig: str
    namespace: str

    @classmethod
    def load(cls, env: str) -> EnvRecord | None:
        try:
            return cls(**json.loads((env_dir(env) / "env.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self) -> None:
        folder = env_dir(self.env)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "env.json.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2))
        tmp.replace(folder / "env.json")
