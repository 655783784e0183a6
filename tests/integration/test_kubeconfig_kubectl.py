"""xtask's kubeconfig handling checked against the real ``kubectl`` (client-go's rules):
the lock convention, the merge of ``$KUBECONFIG``'s list, and the file new entries go to."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest
import yaml

from agn import kubeconfig
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kubectl() -> str:
    return str(ensure_assets(build=False) / "kubectl")


def run(kubectl: str, *args: str, kubeconfig_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": kubeconfig_env}
    return subprocess.run([kubectl, *args], capture_output=True, text=True, env=env, timeout=60)


def entry(name: str, server: str = "https://127.0.0.1:1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def test_no_lock_is_left_and_kubectl_can_write_after_us(kubectl, tmp_path):
    path = tmp_path / "config"
    kubeconfig.add_context(path, entry("local-a"))
    kubeconfig.add_context(path, entry("local-b"))
    kubeconfig.remove_context(path, "local-b", ours=kubeconfig.Written.of(entry("local-b"), "local-b"))
    assert not kubeconfig.lock_path(path).exists()
    for args in (("config", "use-context", "local-a"), ("config", "set-context", "local-a", "--namespace", "team")):
        proc = run(kubectl, *args, kubeconfig_env=str(path))
        assert proc.returncode == 0, proc.stderr
    assert kubeconfig.load(str(path)).config["contexts"][0]["context"]["namespace"] == "team"
    kubeconfig.add_context(path, entry("local-c"))  # and we can write after kubectl
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]


def test_our_lock_is_the_one_kubectl_respects(kubectl, tmp_path):
    path = tmp_path / "config"
    kubeconfig.add_context(path, entry("local-a"))
    with kubeconfig.locked(path):
        proc = run(kubectl, "config", "use-context", "local-a", kubeconfig_env=str(path))
        assert proc.returncode == 1 and f"open {path}.lock: file exists" in proc.stderr
    assert run(kubectl, "config", "use-context", "local-a", kubeconfig_env=str(path)).returncode == 0


def test_the_merge_of_a_list_matches_kubectl(kubectl, tmp_path):
    (tmp_path / "sub" / "certs").mkdir(parents=True)
    (tmp_path / "sub" / "ca.crt").write_text("CA")
    (tmp_path / "sub" / "certs" / "u.crt").write_text("CRT")
    first = {
        "clusters": [{"name": "shared", "cluster": {"server": "https://first:1", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "shared", "user": {"client-certificate": "certs/u.crt", "token": "t1"}}],
        "contexts": [{"name": "shared", "context": {"cluster": "shared", "user": "shared", "namespace": "first"}}],
        "current-context": "",
    }
    second = {
        "clusters": [
            {"name": "shared", "cluster": {"server": "https://second:2", "proxy-url": "http://p:3"}},
            {"name": "other", "cluster": {"server": "https://other:3"}},
        ],
        "users": [{"name": "shared", "user": {"token": "t2"}}, {"name": "other", "user": {"token": "t3"}}],
        "contexts": [
            {"name": "shared", "context": {"cluster": "shared", "user": "shared", "namespace": "second"}},
            {"name": "other", "context": {"cluster": "other", "user": "other"}},
        ],
        "current-context": "other",
    }
    a, b = tmp_path / "sub" / "a", tmp_path / "b"
    a.write_text(yaml.safe_dump(first))
    b.write_text(yaml.safe_dump(second))
    listed = os.pathsep.join([str(tmp_path / "missing"), str(a), str(b)])
    proc = run(kubectl, "config", "view", "--flatten", "-o", "json", kubeconfig_env=listed)
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)
    ours = kubeconfig.load(None, {"KUBECONFIG": listed}).config

    def by_name(cfg: dict, section: str) -> dict:
        return {e["name"]: e[kubeconfig.SECTIONS[section]] for e in cfg[section]}

    assert ours["current-context"] == theirs["current-context"] == "other"
    for section in ("clusters", "users", "contexts"):
        assert by_name(ours, section).keys() == by_name(theirs, section).keys(), section
    assert by_name(ours, "contexts") == {
        k: {kk: vv for kk, vv in v.items() if vv} for k, v in by_name(theirs, "contexts").items()
    }
    cluster, user = by_name(ours, "clusters")["shared"], by_name(ours, "users")["shared"]
    assert cluster == {"server": "https://first:1", "certificate-authority": str(tmp_path / "sub" / "ca.crt")}
    # kubectl embedded the same files ours resolved to (relative to the file that named them).
    assert base64.b64decode(by_name(theirs, "clusters")["shared"]["certificate-authority-data"]) == b"CA"
    assert by_name(theirs, "clusters")["shared"]["server"] == "https://first:1"
    assert "proxy-url" not in by_name(theirs, "clusters")["shared"]  # the first entry wins whole
    assert user["client-certificate"] == str(tmp_path / "sub" / "certs" / "u.crt")
    assert base64.b64decode(by_name(theirs, "users")["shared"]["client-certificate-data"]) == b"CRT"
    assert by_name(theirs, "users")["shared"]["token"] == user["token"] == "t1"


@pytest.mark.parametrize("existing, expected", [((), "z"), (("y",), "y"), (("x", "z"), "x")])
def test_new_entries_go_where_kubectl_puts_them(kubectl, tmp_path, existing, expected):
    paths = {n: tmp_path / n for n in ("x", "y", "z")}
    for n in existing:
        paths[n].write_text(yaml.safe_dump(entry(f"ctx-{n}")))
    listed = os.pathsep.join(str(p) for p in paths.values())
    ours = kubeconfig.write_target(kubeconfig.kubeconfig_files(None, {"KUBECONFIG": listed}))
    proc = run(kubectl, "config", "set-context", "brand-new", "--cluster", "c", kubeconfig_env=listed)
    assert proc.returncode == 0, proc.stderr
    theirs = [n for n, p in paths.items() if p.exists() and "brand-new" in p.read_text()]
    assert theirs == [expected] and ours == str(paths[expected])
