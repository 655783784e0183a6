"""Finding ``llama-server`` and the llama vocabulary the tiny model borrows.

Order: ``$AGN_LLAMA_SERVER`` (bring your own binary) when it is executable, else the versioned
cache that ``scripts/install-llama-server.sh`` fills
(``<cache>/engines/llama-server-<version>/``). The vocabulary (``ggml-vocab-llama-spm.gguf``,
from llama.cpp's own source) is ``$AGN_LLAMA_VOCAB``, else the file beside the binary, else the
cache's. Building is the script's job (about 12 minutes cold on 2 cores); this module only says
how when something is missing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from xtask.errors import RuntimeUnavailable
from xtask.record import Record
from xtask.runtime.assets import cache_root
from xtask.state import REPO_ROOT

INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-llama-server.sh"
VERSIONS_FILE = REPO_ROOT / "scripts" / "engines" / "versions.env"
BINARY = "llama-server"
VOCAB = "ggml-vocab-llama-spm.gguf"
SERVER_ENV = "AGN_LLAMA_SERVER"
VOCAB_ENV = "AGN_LLAMA_VOCAB"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class LlamaAssets(Record):
    server: Path  # the llama-server binary
    vocab: Path  # a llama (SentencePiece) vocabulary in GGUF


def version(versions_file: Path = VERSIONS_FILE) -> str:
    """The llama-cpp-python sdist version whose vendored llama.cpp is built."""
    try:
        text = versions_file.read_text()
    except OSError as exc:  # installed from a wheel: the build script is not there either
        raise RuntimeUnavailable(
            f"{versions_file}: cannot read it ({exc.strerror or exc})",
            hint="real engines run from a checkout of the repository (scripts/install-llama-server.sh)",
        ) from exc
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "LLAMA_CPP_PYTHON_VERSION" and value:
            return value
    raise ValueError(f"{versions_file}: no LLAMA_CPP_PYTHON_VERSION=")


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return cache_root(environ) / "engines" / f"llama-server-{version()}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find(environ: Mapping[str, str] = os.environ) -> LlamaAssets | None:
    """The binary and vocabulary to use, or None when either is missing."""
    cached = cache_dir(environ)
    own = environ.get(SERVER_ENV)
    server = Path(own) if own and _executable(Path(own)) else cached / BINARY
    if not _executable(server):
        return None
    candidates = [Path(v) for v in (environ.get(VOCAB_ENV),) if v] + [server.parent / VOCAB, cached / VOCAB]
    vocab = next((v for v in candidates if v.is_file()), None)
    return LlamaAssets(server, vocab) if vocab is not None else None


def missing_hint(environ: Mapping[str, str] = os.environ) -> str:
    """How to get the binary: the script (and what it needs), or bring your own."""
    return (
        f"run {INSTALL_SCRIPT.relative_to(REPO_ROOT)} (needs cmake, g++ and PyPI; about 12 minutes cold on "
        f"2 cores) to build it into {cache_dir(environ)}, or set {SERVER_ENV} to a llama-server binary "
        f"(and {VOCAB_ENV} to a {VOCAB})"
    )


def require(environ: Mapping[str, str] = os.environ) -> LlamaAssets:
    """The assets, or :class:`RuntimeUnavailable` saying how to build them."""
    found = find(environ)
    if found is None:
        raise RuntimeUnavailable(f"{BINARY} is not built here", hint=missing_hint(environ))
    return found
