"""A tiny llama model for ``llama-server``, made here: seeded random weights, llama.cpp's own vocabulary.

Nothing to download and nothing to commit: :func:`ensure_model` writes a GGUF file of the llama
architecture (by default 2 layers of width 64, a few MB, loaded in well under a second) with the
``gguf`` package, its weights drawn from a seeded numpy generator and its tokenizer copied from
the vocabulary file ``scripts/install-llama-server.sh`` puts beside the binary. The same
parameters and vocabulary give the same bytes, so the file is cached under a hash of them
(``<cache>/engines/models/tiny-llama-<hash>.gguf``) and written once.

Random weights almost never emit the end-of-sequence token, so a completion runs until its
``n_predict``: a test sets how long a generation lasts by how many tokens it asks for, and the
model's long context (:attr:`TinyModel.context_length`) leaves room for thousands.

It lives in the tool (``xtask/``), not under ``tests/``: ``env up --env engines`` serves it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path

from xtask.errors import RuntimeUnavailable
from xtask.record import Record

GENERATOR_VERSION = 1  # bump when the file this writes changes for the same parameters
ARCH = "llama"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TinyModel(Record):
    """The model's shape and seed; every field is part of the cache key."""

    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128
    context_length: int = 32768
    seed: int = 0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if field.name == "seed" else 1):
                raise ValueError(f"TinyModel.{field.name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"TinyModel: n_embd {self.n_embd} must split into {self.n_head} heads of even width")

    def key(self, vocab_digest: str) -> str:
        """The cache key: these parameters, the vocabulary's content and the generator's version."""
        doc = {**dataclasses.asdict(self), "vocab": vocab_digest, "generator": GENERATOR_VERSION}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_path(models_dir: Path, vocab: Path, model: TinyModel = TinyModel()) -> Path:
    return models_dir / f"tiny-llama-{model.key(file_digest(vocab))}.gguf"


def ensure_model(models_dir: Path, vocab: Path, model: TinyModel = TinyModel()) -> Path:
    """The model's file under ``models_dir``, written (atomically) unless it is there already."""
    path = model_path(models_dir, vocab, model)
    if path.is_file():
        return path
    models_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=models_dir, prefix=".tiny-llama-", suffix=".gguf")
    os.close(fd)
    try:
        write_model(Path(tmp), vocab, model)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_model(path: Path, vocab: Path, model: TinyModel) -> None:
    """Write the GGUF file: the hyperparameters, the vocabulary's ``tokenizer.*`` fields, the weights."""
    try:
        import gguf  # the test extra's; imported here so the rest of xtask never needs it
    except ImportError as exc:
        raise RuntimeUnavailable(
            "writing the tiny llama model needs the gguf package", hint="pip install -e '.[test]' (scripts/setup.sh)"
        ) from exc

    reader = gguf.GGUFReader(vocab)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{vocab}: not a vocabulary (no tokenizer.ggml.tokens)")
    n_vocab = len(tokens.data)
    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.add_name(f"agn tiny llama (seed {model.seed})")
    writer.add_context_length(model.context_length)
    writer.add_embedding_length(model.n_embd)
    writer.add_block_count(model.n_layer)
    writer.add_feed_forward_length(model.n_ff)
    writer.add_head_count(model.n_head)
    writer.add_head_count_kv(model.n_head)
    writer.add_rope_dimension_count(model.n_embd // model.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            sub_type = field.types[1] if len(field.types) > 1 else None
            writer.add_key_value(name, field.contents(), field.types[0], sub_type)
    for name, array in _weights(model, n_vocab):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _weights(model: TinyModel, n_vocab: int):
    """(name, array) of every tensor, in order, from one seeded generator. numpy's shape is (out,
    in); the writer stores it reversed, as GGUF wants. The output matrix is left out: llama.cpp then
    uses the token embeddings for it (tied), which halves the file."""
    import numpy as np

    rng = np.random.default_rng(model.seed)

    def matrix(rows: int, cols: int, dtype=np.float32):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(dtype)

    ones = np.ones(model.n_embd, dtype=np.float32)
    yield "token_embd.weight", matrix(n_vocab, model.n_embd, np.float16)
    yield "output_norm.weight", ones
    e, f = model.n_embd, model.n_ff
    for i in range(model.n_layer):
        yield f"blk.{i}.attn_norm.weight", ones
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield f"blk.{i}.{part}.weight", matrix(e, e)
        yield f"blk.{i}.ffn_norm.weight", ones
        yield f"blk.{i}.ffn_gate.weight", matrix(f, e)
        yield f"blk.{i}.ffn_up.weight", matrix(f, e)
        yield f"blk.{i}.ffn_down.weight", matrix(e, f)
