"""Reading kubeconfigs as kubectl does: which files, the merge, relative paths, context choice, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agn import kubeconfig as kc
from agn.kube import ConfigError, Kube
from agn.kubeconfig import kubeconfig_path


def config(*contexts: str, current: str | None = None, server: str = "https://127.0.0.1:6443", ns: str = "") -> dict:
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": server}} for c in contexts],
        "users": [{"name": c, "user": {"token": f"token-{c}"}} for c in contexts],
        "contexts": [
            {"name": c, "context": {"cluster": c, "user": c, **({"namespace": ns} if ns else {})}} for c in contexts
        ],
    }
    if current is not None:
        out["current-context"] = current
    return out


def write(path: Path, data) -> str:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


# -- which files, which one is written ------------------------------------------------------------
def test_files_explicit_then_env_list_then_default():
    assert kc.kubeconfig_files("x", {"KUBECONFIG": "a:b"}) == kc.Files(("x",), "--kubeconfig")
    assert kc.kubeconfig_files(None, {"KUBECONFIG": f"a{os.pathsep}{os.pathsep}b{os.pathsep}a"}).paths == ("a", "b")
    assert kc.kubeconfig_files(None, {"KUBECONFIG": ""}, home="/h") == kc.Files(("/h/.kube/config",), "default")
    assert kc.kubeconfig_files(None, {}, home="/h").paths == ("/h/.kube/config",)


@pytest.mark.parametrize(
    "paths, existing, expected",
    [
        (("a",), set(), "a"),
        (("a", "b", "c"), {"b", "c"}, "b"),  # the first one that exists
        (("a", "b"), {"a", "b"}, "a"),
        (("a", "b"), set(), "b"),  # none exists: the last one
    ],
)
def test_write_target_is_kubectls_default_filename(paths, existing, expected):
    assert kc.write_target(kc.Files(paths, "$KUBECONFIG"), exists=existing.__contains__) == expected


def test_write_target_explicit_even_if_missing():
    assert kc.write_target(kc.Files(("x",), "--kubeconfig"), exists=lambda p: False) == "x"


def test_kubeconfig_path_follows_the_env_list(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}")
    assert kubeconfig_path() == str(b)  # neither exists: the last
    write(a, config("x"))
    assert kubeconfig_path() == str(a)
    assert kubeconfig_path("explicit") == "explicit"


# -- the merge -------------------------------------------------------------------------------------
def test_first_file_wins_per_named_entry_whole():
    first = {"clusters": [{"name": "c", "cluster": {"server": "https://first"}}], "current-context": ""}
    second = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://second", "proxy-url": "http://p"}},
            {"name": "d", "cluster": {"server": "https://d"}},
        ],
        "current-context": "from-second",
    }
    merged = kc.merge([("/k/a", first), ("/k/b", second)])
    assert merged["clusters"] == [
        {"name": "c", "cluster": {"server": "https://first"}},
        {"name": "d", "cluster": {"server": "https://d"}},
    ]
    assert merged["current-context"] == "from-second"  # the first *non-empty* one
    assert kc.merge([("/k/b", second), ("/k/a", {"current-context": "a"})])["current-context"] == "from-second"


def test_relative_file_references_resolve_against_their_own_file():
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://s", "certificate-authority": "ca.crt"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate": "certs/u.crt",
                    "client-key": "/abs/u.key",
                    "tokenFile": "tok",
                    "exec": {"command": "./bin/auth"},
                },
            },
            {"name": "v", "user": {"exec": {"command": "kubelogin"}}},
        ],
    }
    merged = kc.merge([("/etc/kube/one", doc)])
    assert merged["clusters"][0]["cluster"]["certificate-authority"] == "/etc/kube/ca.crt"
    user = merged["users"][0]["user"]
    assert (user["client-certificate"], user["client-key"], user["tokenFile"], user["exec"]["command"]) == (
        "/etc/kube/certs/u.crt",
        "/abs/u.key",
        "/etc/kube/tok",
        "/etc/kube/./bin/auth",
    )
    assert merged["users"][1]["user"]["exec"]["command"] == "kubelogin"  # looked up on PATH
    assert doc["clusters"][0]["cluster"]["certificate-authority"] == "ca.crt"  # inputs untouched


names = st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=4)


@given(st.lists(st.tuples(names, st.sampled_from(["", "a", "b"])), min_size=1, max_size=4))
def test_merge_property_first_definition_wins(files):
    docs = [
        (f"/k/{i}", {"contexts": [{"name": n, "context": {"cluster": f"{n}-{i}"}} for n in ns], "current-context": cur})
        for i, (ns, cur) in enumerate(files)
    ]
    merged = kc.merge(docs)
    for entry in merged["contexts"]:
        first = next(i for i, (ns, _) in enumerate(files) if entry["name"] in ns)
        assert entry["context"]["cluster"] == f"{entry['name']}-{first}"
    assert len(merged["contexts"]) == len({n for ns, _ in files for n in ns})
    assert merged["current-context"] == next((cur for _, cur in files if cur), "")


# -- parsing: every error names the file, on one line -------------------------------------------------
@pytest.mark.parametrize(
    "data, message",
    [
        (b"\xff\xfe\x00\x01", "not UTF-8 text"),
        ("clusters: [\n  - name: a\n", "not valid YAML (line 2, column 3: expected the node content, but found '-')"),
        ("a: b: c", "not valid YAML (line 1, column 5: mapping values are not allowed here)"),
        ("- just\n- a list\n", "expected a mapping at the top, got list"),
        ("hello", "expected a mapping at the top, got 'hello'"),
        ("contexts: 5", "contexts must be a list, got 5"),
        ("contexts: [x]", "contexts[0] must be a mapping, got 'x'"),
        ("contexts: [{context: {cluster: c}}]", "contexts[0].name must be a non-empty string, got nothing (null)"),
        ("users: [{name: u}, {name: u}]", "users[1].name: duplicate name 'u' in users"),
        ("contexts: [{name: c, context: [a]}]", "contexts[0].context must be a mapping, got list ['a']"),
        ("contexts: [{name: c, context: {namespace: 5}}]", "contexts[0].context.namespace must be a string, got 5"),
        ("clusters: [{name: c, cluster: {server: [x]}}]", "clusters[0].cluster.server must be a string"),
        ("current-context: [a]", "current-context must be a string, got list ['a']"),
    ],
)
def test_parse_errors_name_file_field_and_value(data, message):
    with pytest.raises(ConfigError) as exc:
        kc.parse(data, "/home/me/.kube/config")
    text = str(exc.value)
    assert text.startswith("kubeconfig /home/me/.kube/config: ") and message in text
    assert "\n" not in text


def test_empty_file_is_an_empty_config():
    assert kc.parse(b"", "f") == {} and kc.parse("# only a comment\n", "f") == {}


# -- loading the list --------------------------------------------------------------------------------
def test_load_merges_the_whole_list_and_skips_missing_files(tmp_path):
    a = write(tmp_path / "a", config("one", current="one", server="https://a"))
    b = write(tmp_path / "b", config("one", "two", current="two", server="https://b"))
    loaded = kc.load(None, {"KUBECONFIG": os.pathsep.join([str(tmp_path / "missing"), a, b])})
    assert loaded.read == (a, b)
    assert [c["name"] for c in loaded.config["contexts"]] == ["one", "two"]
    assert [c["cluster"]["server"] for c in loaded.config["clusters"]] == ["https://a", "https://b"]
    assert loaded.config["current-context"] == "one"
    assert loaded.describe() == f"kubeconfig files {a}, {b} ($KUBECONFIG)"


def test_missing_files_are_named(tmp_path):
    with pytest.raises(kc.NoKubeconfig, match=f"kubeconfig {tmp_path}/x: no such file"):
        kc.load(str(tmp_path / "x"), {})
    with pytest.raises(kc.NoKubeconfig) as exc:
        kc.load(None, {"KUBECONFIG": f"{tmp_path}/a{os.pathsep}{tmp_path}/b"})
    assert str(exc.value) == f"no kubeconfig: no file of $KUBECONFIG exists ({tmp_path}/a, {tmp_path}/b)"
    with pytest.raises(kc.NoKubeconfig) as exc:
        kc.load(None, {"KUBECONFIG": f"{tmp_path}/a"})
    assert str(exc.value) == f"no kubeconfig: {tmp_path}/a (from $KUBECONFIG) does not exist"


def test_missing_default_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kc.NoKubeconfig) as exc:
        kc.load(None, {})
    assert (
        str(exc.value)
        == f"no kubeconfig: {tmp_path}/.kube/config does not exist (set $KUBECONFIG or pass --kubeconfig)"
    )


def test_a_bad_file_anywhere_in_the_list_is_an_error_naming_it(tmp_path):
    a = write(tmp_path / "a", config("one", current="one"))
    bad = write(tmp_path / "bad", "::: not yaml: [")
    with pytest.raises(ConfigError, match=f"kubeconfig {bad}: not valid YAML"):
        kc.load(None, {"KUBECONFIG": f"{a}{os.pathsep}{bad}"})
    with pytest.raises(ConfigError, match=f"kubeconfig {tmp_path}: is a directory, not a regular file"):
        kc.load(str(tmp_path), {})


# -- choosing the context ----------------------------------------------------------------------------
def test_an_explicit_context_works_without_current_context():
    cfg = kc.merge([("/k", config("a", "b", ns="team"))])
    name, body = kc.select_context(cfg, "b", where="kubeconfig /k")
    assert (name, kc.namespace_of(body)) == ("b", "team")


@pytest.mark.parametrize(
    "cfg, context, message",
    [
        (config("a"), None, "no context: kubeconfig /k sets no current-context; pass --context"),
        (config("a", current="a"), "zz", "context 'zz' not found in kubeconfig /k (contexts: a)"),
        (config("a", current="ghost"), None, "context 'ghost' not found in kubeconfig /k (contexts: a)"),
        (
            {"contexts": [{"name": "a", "context": {"cluster": "nope"}}]},
            "a",
            "context 'a' names cluster 'nope', which is not in kubeconfig /k",
        ),
        (
            {"clusters": [{"name": "c", "cluster": {}}], "contexts": [{"name": "a", "context": {"cluster": "c"}}]},
            "a",
            "cluster 'c' of context 'a' has no server in kubeconfig /k",
        ),
        (
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://s"}}],
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "who"}}],
            },
            "a",
            "context 'a' names user 'who', which is not in kubeconfig /k",
        ),
    ],
)
def test_context_errors(cfg, context, message):
    with pytest.raises(ConfigError) as exc:
        kc.select_context(kc.merge([("/k", cfg)]), context, where="kubeconfig /k")
    assert str(exc.value) == message


def test_kube_from_kubeconfig_with_context_and_no_current_context(tmp_path, monkeypatch):
    path = write(tmp_path / "config", config("a", "b", ns="team", server="https://10.1.2.3:6443"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube = Kube.from_kubeconfig(kubeconfig=path, context="b", field_manager="t")
    try:
        assert (kube.host, kube.context) == ("https://10.1.2.3:6443", "b")
        assert kube.namespace == "team"
    finally:
        kube.close()
    with pytest.raises(ConfigError, match="sets no current-context"):
        Kube.from_kubeconfig(kubeconfig=path, field_manager="t")


def test_kube_from_the_merged_list_uses_the_first_files_entries(tmp_path, monkeypatch):
    a = write(tmp_path / "a", config("shared", server="https://first:1"))
    b = write(tmp_path / "b", config("shared", "other", current="other", server="https://second:2"))
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}")
    kube = Kube.from_kubeconfig(field_manager="t")  # current-context from b, entries first-wins
    try:
        assert (kube.context, kube.host) == ("other", "https://second:2")
    finally:
        kube.close()
    kube = Kube.from_kubeconfig(context="shared", field_manager="t")
    try:
        assert kube.host == "https://first:1"
    finally:
        kube.close()


def test_unusable_credentials_are_one_line_errors(tmp_path):
    cfg = config("a", current="a")
    cfg["clusters"][0]["cluster"]["certificate-authority-data"] = "%%% not base64 %%%"
    path = write(tmp_path / "config", cfg)
    with pytest.raises(ConfigError) as exc:
        Kube.from_kubeconfig(kubeconfig=path, field_manager="t")
    assert (
        str(exc.value) == f"cluster 'a' of context 'a' in kubeconfig {path}: certificate-authority-data is not base64"
    )
