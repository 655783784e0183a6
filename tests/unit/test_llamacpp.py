"""llama.cpp in the loop, the parts that need no binary: the tiny model is written deterministically
and cached by its parameters, the binary is found (or its absence explained), the command line
is what docs/engines.md says, and env files declare engines (local runtime only)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import pytest
import yaml

from agn.kube import NotFound
from xtask import components
from xtask.envdef import EngineDef, load_env, parse_env
from xtask.errors import EnvDefinitionError, RuntimeUnavailable
from xtask.llamacpp import assets
from xtask.llamacpp.model import TinyModel, ensure_model, model_path
from xtask.manifests import provider_secrets, render
from xtask.procs import ProcessRecord
from xtask.runtime.local_engines import start_engines, store_keys
from xtask.runtime.steps import UpContext


@pytest.fixture
def vocab(tmp_path: Path) -> Path:
    """A small llama (SentencePiece) vocabulary in GGUF, made here."""
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    tokens = ["<unk>", "<s>", "</s>", *(f"▁w{i}" for i in range(61))]
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types([2, 3, 3, *([1] * 61)])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_model_is_the_same_bytes_for_the_same_parameters_and_written_once(tmp_path: Path, vocab: Path):
    small = TinyModel(n_embd=16, n_layer=1, n_head=2, n_ff=32, context_length=4096, seed=7)
    one = ensure_model(tmp_path / "a", vocab, small)
    two = ensure_model(tmp_path / "b", vocab, small)
    assert one.name == two.name and one.read_bytes() == two.read_bytes()
    stamp = one.stat().st_mtime_ns
    assert ensure_model(tmp_path / "a", vocab, small) == one and one.stat().st_mtime_ns == stamp  # cached
    assert [p.name for p in (tmp_path / "a").iterdir()] == [one.name]  # no temporary left behind
    other = model_path(tmp_path / "a", vocab, TinyModel(n_embd=16, n_layer=1, n_head=2, n_ff=32, seed=8))
    assert other != one  # another seed is another file


def test_the_model_is_a_llama_with_the_vocabulary_and_the_shape_asked_for(tmp_path: Path, vocab: Path):
    small = TinyModel(n_embd=16, n_layer=2, n_head=2, n_ff=32, context_length=8192)
    reader = gguf.GGUFReader(ensure_model(tmp_path, vocab, small))
    fields = {name: f.contents() for name, f in reader.fields.items()}
    assert fields["general.architecture"] == "llama"
    assert (fields["llama.context_length"], fields["llama.embedding_length"], fields["llama.block_count"]) == (
        8192,
        16,
        2,
    )
    assert (
        fields["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"] and fields["tokenizer.ggml.eos_token_id"] == 2
    )
    names = {t.name for t in reader.tensors}
    assert "token_embd.weight" in names and "blk.1.ffn_down.weight" in names and "output.weight" not in names


@pytest.mark.parametrize(
    "bad", [{"n_embd": 0}, {"seed": -1}, {"n_layer": True}, {"n_embd": 10, "n_head": 4}, {"n_embd": 12, "n_head": 4}]
)
def test_a_model_shape_that_cannot_be_is_refused_naming_it(bad: dict):
    with pytest.raises(ValueError, match="TinyModel"):
        TinyModel(**bad)


def test_a_vocabulary_file_without_tokens_is_refused(tmp_path: Path):
    empty = tmp_path / "empty.gguf"
    writer = gguf.GGUFWriter(str(empty), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="not a vocabulary"):
        ensure_model(tmp_path / "models", empty)
    assert not list((tmp_path / "models").iterdir())


def _binary(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / assets.BINARY
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_binary_is_found_in_the_versioned_cache_or_where_the_env_var_says(tmp_path: Path):
    environ = {"AGN_CACHE_DIR": str(tmp_path / "cache")}
    cached = assets.cache_dir(environ)
    assert cached == tmp_path / "cache" / "engines" / f"llama-server-{assets.version()}"
    assert assets.find(environ) is None
    _binary(cached)
    assert assets.find(environ) is None  # no vocabulary yet
    (cached / assets.VOCAB).write_bytes(b"v")
    assert assets.find(environ) == assets.LlamaAssets(cached / assets.BINARY, cached / assets.VOCAB)
    own = _binary(tmp_path / "own")
    found = assets.find({**environ, assets.SERVER_ENV: str(own)})
    assert found == assets.LlamaAssets(own, cached / assets.VOCAB)  # the cache's vocabulary beside its own binary
    (tmp_path / "v.gguf").write_bytes(b"v")
    found = assets.find({**environ, assets.SERVER_ENV: str(own), assets.VOCAB_ENV: str(tmp_path / "v.gguf")})
    assert found is not None and found.vocab == tmp_path / "v.gguf"


def test_a_missing_binary_says_how_to_build_it(tmp_path: Path):
    environ = {"AGN_CACHE_DIR": str(tmp_path), assets.SERVER_ENV: str(tmp_path / "nope")}
    with pytest.raises(RuntimeUnavailable, match="llama-server is not built here") as exc:
        assets.require(environ)
    assert "scripts/install-llama-server.sh" in exc.value.hint and str(assets.cache_dir(environ)) in exc.value.hint


def test_the_version_comes_from_the_versions_file(tmp_path: Path):
    (tmp_path / "v.env").write_text("# comment\nLLAMA_CPP_PYTHON_VERSION=9.9.9\n")
    assert assets.version(tmp_path / "v.env") == "9.9.9"
    (tmp_path / "w.env").write_text("OTHER=1\n")
    with pytest.raises(ValueError, match="no LLAMA_CPP_PYTHON_VERSION"):
        assets.version(tmp_path / "w.env")


def test_the_server_command_line_pins_slots_threads_metrics_and_loopback():
    engine = components.llama_server("p", binary="/b/llama-server", model="/m.gguf", port=4300, slots=3)
    argv = engine.argv("/unused/python")
    assert argv[0] == "/b/llama-server"
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["--model"] == "/m.gguf" and pairs["--host"] == "127.0.0.1" and pairs["--port"] == "4300"
    assert (pairs["--parallel"], pairs["--ctx-size"], pairs["--threads"]) == ("3", str(3 * 8192), "1")
    assert "--metrics" in argv and "--no-webui" in argv
    assert (engine.name, engine.health_path, engine.metrics_path, engine.url()) == (
        "engine-p",
        "/health",
        "/metrics",
        "http://127.0.0.1:4300",
    )
    with pytest.raises(ValueError, match="slots"):
        components.llama_server("p", binary="b", model="m", port=1, slots=0)


def test_the_engines_env_declares_three_llama_servers_one_keyed_beside_fakes():
    env = load_env("engines")
    engines = {p.name: p.engine for p in env.providers if p.engine}
    assert engines == {
        "llama-one": EngineDef("llamacpp", 2),
        "llama-two": EngineDef("llamacpp", 2),
        "llama-keyed": EngineDef("llamacpp", 2, api_key=True),
    }
    assert components.fake_provider_names(env) == ["fake-chat", "fake-embeddings"]
    objs = {
        o["metadata"]["name"]: o["spec"] for o in env.provider_objects({p.name: "http://h:1" for p in env.providers})
    }
    assert objs["llama-one"]["metrics"] == {"format": "llamacpp"} and "metrics" not in objs["fake-chat"]
    # The keyed engine is reached with the Secret the runtime creates; the Roles may read it, no other.
    keyed = {"type": "Bearer", "credentials": {"name": "llama-keyed-api-key", "key": "token"}}
    assert objs["llama-keyed"]["authorization"] == keyed and "authorization" not in objs["llama-one"]
    assert provider_secrets(env) == ["llama-keyed-api-key"]


def test_an_engine_names_its_own_secret_and_authorization_without_api_key_is_refused():
    data = yaml.safe_load(Path(load_env("engines").source).read_text())
    own = {"credentials": {"name": "mine", "key": "k"}}
    data["providers"][4]["authorization"] = own  # llama-keyed
    env = parse_env(data, source=Path("engines.yaml"), expected_name="engines")
    assert next(p for p in env.providers if p.name == "llama-keyed").authorization == own
    data["providers"][0]["authorization"] = own  # llama-one: an engine without apiKey
    data["providers"][1]["engine"]["apiKey"] = "yes"
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("engines.yaml"), expected_name="engines")
    message = str(exc.value)
    assert "providers[0]: has authorization but its engine no apiKey; set engine.apiKey: true" in message
    assert "providers[1].engine.apiKey: must be true or false, got 'yes'" in message


def test_engines_are_refused_where_no_engine_runs():
    with pytest.raises(EnvDefinitionError, match="llama-one, llama-two, llama-keyed declare an engine") as exc:
        render(load_env("engines"))
    assert "--runtime local" in (exc.value.hint or "")


def test_a_bad_engine_entry_is_named_field_by_field():
    data = yaml.safe_load(Path(load_env("engines").source).read_text())
    data["providers"][0]["engine"] = {"kind": "vllm", "slots": 0}
    data["providers"][1]["endpoint"] = "http://127.0.0.1:9"
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("engines.yaml"), expected_name="engines")
    message = str(exc.value)
    assert "providers[0].engine.kind: must be llamacpp, got 'vllm'" in message
    assert "providers[0].engine.slots: must be an integer from 1 to 16, got 0" in message
    assert "providers[1]: has both endpoint and engine" in message


ENGINES = ("llama-one", "llama-two", "llama-keyed")


class FakeSupervisor:
    """Records what the local runtime asks of :class:`xtask.procs.Supervisor` (nothing is started)."""

    def __init__(self) -> None:
        self.live: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str]] = []

    def running(self, name: str):
        argv = self.live.get(name)
        return None if argv is None else ProcessRecord(name, 1, 1, argv, f"/logs/{name}.log")

    def start(self, name: str, argv: list[str]) -> ProcessRecord:
        self.live[name] = list(argv)
        self.calls.append(("start", name))
        return ProcessRecord(name, 1, 1, list(argv), f"/logs/{name}.log")

    def stop(self, name: str) -> bool:
        self.calls.append(("stop", name))
        return self.live.pop(name, None) is not None


def test_the_local_runtime_starts_each_engine_once_and_restarts_one_whose_slots_changed(
    tmp_path: Path, vocab: Path, monkeypatch
):
    cached = tmp_path / "cache" / "engines" / f"llama-server-{assets.version()}"
    _binary(cached)
    (cached / assets.VOCAB).write_bytes(vocab.read_bytes())
    monkeypatch.setenv("AGN_CACHE_DIR", str(tmp_path / "cache"))  # the conftest cleared AGN_LLAMA_*
    envdef = load_env("engines")
    ports = {"engine-llama-one": 4401, "engine-llama-two": 4402, "engine-llama-keyed": 4403}
    state = tmp_path / "state"
    sup, waited = FakeSupervisor(), []

    def up(envdef) -> UpContext:
        ctx = UpContext(
            env="engines", envdef=envdef, context="local-engines", kubeconfig=tmp_path, fresh=True, wait_timeout=1
        )
        start_engines(
            ctx, sup, port_for=ports.__getitem__, wait_answers=lambda rec, url: waited.append(url), state_dir=state
        )
        return ctx

    ctx = up(envdef)
    assert sup.calls == [("start", "engine-llama-one"), ("start", "engine-llama-two"), ("start", "engine-llama-keyed")]
    assert waited == [f"http://127.0.0.1:{port}/health" for port in (4401, 4402, 4403)]
    assert ctx.endpoints == {
        name: f"http://127.0.0.1:{port}" for name, port in zip(ENGINES, (4401, 4402, 4403), strict=True)
    }
    model = sup.live["engine-llama-one"][sup.live["engine-llama-one"].index("--model") + 1]
    assert Path(model).parent == tmp_path / "cache" / "engines" / "models"
    keyed = sup.live["engine-llama-keyed"]
    key_file = Path(keyed[keyed.index("--api-key-file") + 1])
    key = key_file.read_text().strip()
    assert key_file == state / "engine-keys" / "llama-keyed.key" and len(key) >= 40
    assert (key_file.stat().st_mode & 0o777, key_file.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert not any(key in arg for arg in keyed) and "--api-key-file" not in sup.live["engine-llama-one"]
    assert up(envdef).started == [] and len(sup.calls) == 3  # running as asked: left alone
    assert key_file.read_text().strip() == key  # kept across bring-ups
    wider = dataclasses.replace(
        envdef,
        providers=tuple(
            dataclasses.replace(p, engine=EngineDef("llamacpp", 4)) if p.name == "llama-two" else p
            for p in envdef.providers
        ),
    )
    assert up(wider).started == ["engine-llama-two (restarted: its command line changed)", "engine-llama-two"]
    assert sup.calls[3:] == [("stop", "engine-llama-two"), ("start", "engine-llama-two")]
    assert "4" == sup.live["engine-llama-two"][sup.live["engine-llama-two"].index("--parallel") + 1]


class FakeKube:
    """The two calls the Secret step makes: read one (NotFound when absent), apply one."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes]:
        if (namespace, name) not in self.secrets:
            raise NotFound(f"secret {name} not found")
        return {k: v.encode() for k, v in self.secrets[namespace, name].items()}

    def apply(self, body: dict, *, namespace: str) -> dict:
        assert body["kind"] == "Secret" and body["metadata"]["namespace"] == namespace
        self.secrets[namespace, body["metadata"]["name"]] = body["stringData"]
        return body


def test_a_keyed_engines_secret_holds_its_key_and_one_already_there_is_kept(tmp_path: Path):
    kube, envdef = FakeKube(), load_env("engines")
    ctx = UpContext(env="engines", envdef=envdef, context="c", kubeconfig=tmp_path, fresh=True, wait_timeout=1)
    ctx.kube = kube  # type: ignore[assignment]
    store_keys(ctx, state_dir=tmp_path)
    key = (tmp_path / "engine-keys" / "llama-keyed.key").read_text().strip()
    assert kube.secrets == {("agn-engines", "llama-keyed-api-key"): {"token": key}}
    assert ctx.started == ["secret llama-keyed-api-key (the API key of engine-llama-keyed)"]
    kube.secrets[("agn-engines", "llama-keyed-api-key")] = {"token": "changed by someone"}
    store_keys(ctx, state_dir=tmp_path)
    assert kube.secrets[("agn-engines", "llama-keyed-api-key")] == {"token": "changed by someone"}
    assert len(ctx.started) == 1


def test_without_the_versions_file_the_engines_say_they_need_a_checkout(tmp_path: Path):
    with pytest.raises(RuntimeUnavailable, match="cannot read it") as exc:
        assets.version(tmp_path / "missing.env")
    assert "checkout" in (exc.value.hint or "")
