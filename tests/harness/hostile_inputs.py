#!/usr/bin/env python3
"""A sweep of hostile inputs through the real CLI, reported as one table.

Each row runs ``python -m xtask`` as a subprocess, as a new user would, against a real local
control plane (kube-apiserver + etcd started here, on loopback), with its own state folder,
kubeconfig, journal folder, env folder and ``TMPDIR`` under one row folder, and a "victim"
folder beside it that nothing may touch. A row is judged on five things:

- **changed**: a file under the row folder or the victim folder was created, changed or removed
  (a file left in the row's ``TMPDIR`` counts), or an AGN object's resourceVersion moved;
- **hung**: the CLI ran longer than ``--hang-after`` seconds (default 30) and was killed;
- **traceback**: a Python traceback was printed (without ``-v``);
- **raw escape**: a control character other than newline and tab reached stdout or stderr;
- **wrong exit**: the exit code is not the one the row expects (2 for a name that is not a
  name or a bad flag, 3 for a valid name that is not there, 1 for an unusable file or server).

The inputs are of kinds that ``tests/e2e/test_bad_inputs.py`` does not hold: path traversal in
names, names with newlines, escapes and rich markup, devices, FIFOs and symlinks where files
are read or written, huge and deeply nested files, YAML alias bombs, duplicate keys, numbers out
of range, servers that never answer or answer wrongly. ``tests/security/`` holds one test per
kind; this sweep is the wider net, run by hand:

    .venv/bin/python tests/harness/hostile_inputs.py            # every row, a table at the end
    .venv/bin/python tests/harness/hostile_inputs.py -k fifo    # rows whose id contains "fifo"

It exits 1 when any row fails one of the five checks, and names each such row and why.
"""

from __future__ import annotations

import argparse
import base64
import copy
import dataclasses
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Kube, KubeError  # noqa: E402

API = "agn.dev/v1alpha1"
CTX = "local-tests"
ESC = "\x1b[31m"


# -- the world every row runs against -----------------------------------------------------------------
@dataclasses.dataclass
class World:
    kube: Kube
    ns: str
    esc_ns: str  # a namespace whose provider has escapes in its selectionGroup
    kubeconfig: dict
    silent_port: int  # accepts TCP, never answers
    closed_port: int  # nothing listens
    plain_http_port: int  # answers 400 to everything, like an https server spoken to in http

    def snapshot(self) -> dict[str, str]:
        out = {}
        for ns in (self.ns, self.esc_ns):
            for res in (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS):
                for obj in self.kube.list(res, ns)[0]:
                    out[f"{ns}/{res.kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
        return out


def _silent_server() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            held.append(conn)  # never answered, never closed

    threading.Thread(target=accept, daemon=True).start()
    return sock, sock.getsockname()[1]


def _bad_request_server() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(2)
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            finally:
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return sock, sock.getsockname()[1]


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def make_world(kube: Kube, kubeconfig_text: str) -> World:
    ns, esc_ns = "sweep", "sweep-escapes"
    deadline = time.monotonic() + 60
    while True:  # a CRD just installed answers "storage is (re)initializing" for a moment
        try:
            for res in (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS):
                kube.list(res, "default")
            break
        except KubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for name in (ns, esc_ns):
        kube.ensure_namespace(name)

    def create(namespace: str, res, name: str, spec: dict, labels: dict | None = None) -> None:
        meta = {"name": name, **({"labels": labels} if labels else {})}
        kube.create(res, namespace, {"apiVersion": API, "kind": res.kind, "metadata": meta, "spec": spec})

    create(ns, NETWORKS, "net", {"providerSelector": {"matchLabels": {"net": "yes"}}})
    create(ns, CONSUMERS, "c-a", {"network": "net"})
    for name, gw, group in (("p-one", "gw-a", "chat"), ("p-two", "gw-a", "embed"), ("p-three", "gw-b", "chat")):
        spec = {"endpoint": f"http://127.0.0.1:9/{name}", "providerGateway": gw, "selectionGroup": group, "rank": 0}
        create(ns, PROVIDERS, name, spec, {"net": "yes"})
    create(
        esc_ns,
        PROVIDERS,
        "p-esc",
        {
            "endpoint": "http://127.0.0.1:9/e",
            "providerGateway": f"{ESC}gw",
            "selectionGroup": f"{ESC}chat[/]",
            "rank": 0,
        },
    )
    config = yaml.safe_load(kubeconfig_text)
    for c in config["contexts"]:
        if c["name"] == CTX:
            c["context"]["namespace"] = ns
    _, silent = _silent_server()
    _, plain = _bad_request_server()
    return World(kube, ns, esc_ns, config, silent, _closed_port(), plain)


# -- rows ---------------------------------------------------------------------------------------------
Content = str | bytes | Callable[[World, Path], Any]


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]  # after `python -m xtask`; {tmp} {ns} are replaced
    code: int
    files: dict[str, Content] = dataclasses.field(default_factory=dict)  # made under {tmp} before the run
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    expect: str = ""  # a piece of the message a user must see (not judged by the five checks; reported)
    may_change: tuple[str, ...] = ()  # row-folder paths the command is asked to change (env down: its state)


def kubeconfig(change: Callable[[dict, World], Any] | None = None) -> Callable[[World, Path], str]:
    def build(w: World, tmp: Path) -> str:
        config = copy.deepcopy(w.kubeconfig)
        if change:
            change(config, w)
        return yaml.safe_dump(config)

    return build


def cluster(config: dict) -> dict:
    return config["clusters"][0]["cluster"]


def user(config: dict) -> dict:
    return config["users"][0]["user"]


def set_server(url: str) -> Callable[[dict, World], None]:
    return lambda c, w: cluster(c).update(
        server=url.format(silent=w.silent_port, closed=w.closed_port, plain=w.plain_http_port)
    )


def fifo(w: World, tmp: Path) -> Any:
    return FIFO


def char_device(w: World, tmp: Path) -> Any:
    return DEVICE


def symlink_to(target: str) -> Callable[[World, Path], Any]:
    return lambda w, tmp: Symlink(target.format(tmp=tmp))


@dataclasses.dataclass(frozen=True)
class Symlink:
    target: str


FIFO, DEVICE = object(), object()


def example_env(change: Callable[[dict], Any] | None = None) -> str:
    data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    if change:
        change(data)
    return yaml.safe_dump(data)


def alias_bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def journal(w: World, **header: Any) -> str:
    records = header.pop("_records", None)
    head = {
        "type": "header",
        "format": "agn.dev/drain-journal/v2",
        "operation": "op-sweep",
        "context": CTX,
        "namespace": w.ns,
        "request": "drain",
        "reason": None,
        "startedAt": "2026-12-01T00:00:00Z",
        "plan": [
            {"provider": "p-one", "previous": None, "previousAnnotations": {}, "resourceVersion": "1", "generation": 1}
        ],
    }
    head.update(header)
    provider = head["plan"][0]["provider"] if head.get("plan") else "p-one"
    lines = records or [
        {"type": "intent", "provider": provider, "resourceVersion": "1", "generation": 1},
        {"type": "done", "provider": provider, "generation": 2},
    ]
    return "".join(json.dumps(rec) + "\n" for rec in [head, *lines])


def journal_with(**header: Any) -> Callable[[World, Path], str]:
    return lambda w, tmp: journal(w, **header)


def plan_of(provider: str) -> list[dict]:
    return [
        {"provider": provider, "previous": None, "previousAnnotations": {}, "resourceVersion": "1", "generation": 1}
    ]


def recorded_env(namespace: str) -> Callable[[World, Path], str]:
    """env.json of an env that is "up" on the test control plane (for env status)."""

    def build(w: World, tmp: Path) -> str:
        ns = {"{ns}": w.ns, "{esc}": w.esc_ns}.get(namespace, namespace)
        record = {
            "env": "sweep",
            "runtime": "local",
            "context": CTX,
            "kubeconfig": str(tmp / "kubeconfig"),
            "namespace": ns,
        }
        return json.dumps(record)

    return build


DRAIN = ("env", "provider-drain")
P1 = (*DRAIN, "--provider", "p-one")
RESTORE = ("env", "drain-restore", "{tmp}/j.jsonl")
ENVS = {"AGN_XTASK_ENVS_DIR": "{tmp}/envs"}

BAD_ENV_NAMES = {
    "dotdot-victim": "../../../../victim",
    "dotdot": "..",
    "dot": ".",
    "empty": "",
    "slash": "a/b",
    "absolute": "{tmp}/../../victim",
    "long-300": "a" * 300,
    "long-64": "a" * 64,
    "upper": "Example",
    "space": "ex ample",
    "trailing-newline": "example\n",
    "escape": f"{ESC}red",
    "markup-close": "[/]",
    "markup-link": "[link=file:///etc/passwd]x",
    "leading-dash": "-rf",
    "unicode": "exämple",
    "dotted": "a.b",
    "underscore": "a_b",
    "nul-free-tab": "a\tb",
    "percent": "%2e%2e",
}

BAD_NAMESPACES = {
    "dot": (".", 2),
    "dotdot": ("..", 2),
    "upper-underscore": ("Bad_NS", 2),
    "trailing-newline": ("sweep\n", 2),
    "escape": (f"{ESC}ns", 2),
    "traversal": ("../kube-system", 2),
    "long-64": ("a" * 64, 2),
    "slash": ("sweep/x", 2),
    "percent": ("%2e%2e", 2),
    "absent": ("no-such-namespace", 3),
}

BAD_OBJECT_NAMES = {
    "encoded-slash": "p-one%2Fstatus",
    "subresource": "p-one/status",
    "traversal": "../p-one",
    "upper": "P-ONE",
    "trailing-newline": "p-one\n",
    "escape": "\x1b[2Jp",
    "long-254": "p" * 254,
    "space": " p-one",
    "query": "p-one?watch=1",
    "fragment": "p-one#x",
    "markup": "[bold]p[/bold]",
}


def rows() -> list[Row]:
    out: list[Row] = []
    # Env names: status and down must refuse them (exit 2) and touch nothing; down used to remove folders.
    for key, name in BAD_ENV_NAMES.items():
        for cmd in ("status", "down", "render"):
            out.append(Row(f"env-name-{key}-{cmd}", ("env", cmd, "--env", name), 2, expect="env name"))
    out.append(Row("env-name-dotdot-victim-up", ("env", "up", "--runtime", "local", "--env", "../../../../victim"), 2))
    out.append(Row("env-name-escape-up", ("env", "up", "--runtime", "local", "--env", f"{ESC}x"), 2))
    # State home that is not a folder.
    for key, content in (("file", "x"), ("fifo", fifo), ("device", char_device)):
        out.append(
            Row(
                f"home-is-a-{key}-status",
                ("env", "status"),
                1,
                files={"home": content},
                env={"AGN_XTASK_HOME": "{tmp}/home"},
            )
        )
        out.append(
            Row(
                f"home-is-a-{key}-down",
                ("env", "down"),
                1,
                files={"home": content},
                env={"AGN_XTASK_HOME": "{tmp}/home"},
            )
        )
    # A state folder without the env's marker, or a symlinked one, is never removed.
    out.append(
        Row(
            "state-folder-symlink-down",
            ("env", "down", "--env", "sweep"),
            3,
            files={"state/envs/sweep": symlink_to("{tmp}/../../victim")},
        )
    )
    # Namespaces: a name that is not a name is exit 2; a valid absent one exit 3.
    for key, (ns, code) in BAD_NAMESPACES.items():
        out.append(Row(f"namespace-{key}-drain", (*P1, "--dry-run", "--namespace", ns), code, expect="namespace"))
        if code == 2:
            out.append(Row(f"namespace-{key}-render", ("env", "render", "--namespace", ns), 2))
    # Object names for --provider, --gateway, --network/--consumer.
    for key, name in BAD_OBJECT_NAMES.items():
        out.append(Row(f"provider-{key}", (*DRAIN, "--provider", name, "--dry-run"), 2))
        # A gateway is a spec value, not an object name: any string selects nothing here (exit 3).
        out.append(Row(f"gateway-{key}", (*DRAIN, "--gateway", name, "--dry-run"), 3))
        out.append(Row(f"consumer-{key}", (*P1, "--dry-run", "--network", "net", "--consumer", name), 2))
    out.append(Row("provider-absent-json", (*DRAIN, "--provider", "nope", "-o", "json"), 3, expect='"exit"'))
    # -o on every reporting command: an unknown value is exit 2 naming it (escaped) and the choices;
    # yaml and name of a refused drain are still its report (exit 3, progress on stderr only).
    for cmd in (
        ("env", "status"),
        ("env", "down"),
        ("env", "render"),
        ("env", "drains"),
        (*DRAIN, "--provider", "p-one"),
    ):
        for key, value in (("escape", f"json{ESC}"), ("markup", "[bold]json"), ("huge", "j" * 100_000), ("empty", "")):
            out.append(Row(f"output-{key}-{cmd[1]}", (*cmd, "-o", value), 2, expect="is not one of"))
    out.append(Row("provider-absent-yaml", (*DRAIN, "--provider", "nope", "-o", "yaml"), 3, expect="exit:"))
    out.append(Row("provider-absent-name", (*DRAIN, "--provider", "nope", "-o", "name"), 3))
    # The reason of --override-budget is recorded (journal, hold, Event, report): no escapes, bounded;
    # markup is printable text, echoed as text by a dry run. --lock-timeout: huge numbers are refused.
    for key, reason in (("escape", f"{ESC}x"), ("newline", "a\nb"), ("nul-like", "a\x7fb"), ("huge", "r" * 100_000)):
        out.append(Row(f"override-budget-{key}", (*P1, "--override-budget", reason), 2, expect="--override-budget"))
    out.append(Row("override-budget-markup-dry-run", (*P1, "--dry-run", "--override-budget", "[bold]x[/bold]"), 0))
    for key, value in (("huge", "9" * 40), ("exponent", "1e9"), ("unicode-digits", "\u0663s")):
        out.append(Row(f"lock-timeout-{key}", (*P1, "--lock-timeout", value), 2, expect="--lock-timeout"))
    # Journal folders.
    for key, value, files in (
        ("empty", "", {}),
        ("fifo", "{tmp}/jd", {"jd": fifo}),
        ("device", "{tmp}/jd", {"jd": char_device}),
    ):
        out.append(Row(f"journal-dir-{key}", (*P1, "--journal-dir", value), 2, files=files))
    # A folder name with an escape is a legal path: used, and echoed escaped.
    out.append(Row("journal-dir-escape-dry-run", (*P1, "--dry-run", "--journal-dir", f"{{tmp}}/{ESC}jd"), 0))
    # Kubeconfigs that are not regular files, or are hostile.
    kc_env = {"KUBECONFIG": "{tmp}/kc"}
    for key, content, code in (
        ("fifo", fifo, 1),
        ("char-device", char_device, 1),
        ("huge", lambda w, tmp: "# " + "x" * (40 * 1024 * 1024) + "\n", 1),
        ("alias-bomb", alias_bomb(), 1),
        ("nested-lists", "[" * 50_000, 1),
        ("nested-maps", "{a: " * 50_000, 1),
        ("duplicate-keys", kubeconfig(lambda c, w: None), 1),
        ("symlink-to-fifo", symlink_to("{tmp}/real-fifo"), 1),
        ("zero-symlink", symlink_to("/dev/zero"), 1),
    ):
        files: dict[str, Content] = {"kc": content}
        if key == "duplicate-keys":
            files = {"kc": lambda w, tmp: "kind: Config\n" + kubeconfig()(w, tmp) + "kind: Config\n"}
        if key == "symlink-to-fifo":
            files = {"real-fifo": fifo, "kc": content}
        out.append(Row(f"kubeconfig-{key}-drain", (*P1, "--dry-run"), code, files=files, env=kc_env))
    kc = {"KUBECONFIG": "{tmp}/kubeconfig"}
    for key, change, expect in (
        ("server-http", set_server("http://127.0.0.1:{plain}"), "http"),
        ("server-no-scheme", set_server("127.0.0.1:{plain}"), "server"),
        ("server-silent", set_server("https://127.0.0.1:{silent}"), "did not answer"),
        ("server-closed", set_server("https://127.0.0.1:{closed}"), "127.0.0.1"),
        ("server-escape", lambda c, w: cluster(c).update(server=f"https://{ESC}host:1"), "server"),
        (
            "bad-client-key",
            lambda c, w: user(c).update({"client-key-data": base64.b64encode(b"garbage").decode()}),
            "client",
        ),
        (
            "missing-ca-file",
            lambda c, w: (
                cluster(c).pop("certificate-authority-data")
                and cluster(c).update({"certificate-authority": "/nonexistent/ca.crt"})
            ),
            "certificate-authority",
        ),
        ("token-rejected", lambda c, w: c["users"][0].update(user={"token": "nope"}), "Unauthorized"),
        (
            "exec-fails",
            lambda c, w: c["users"][0].update(
                user={
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "false",
                        "interactiveMode": "Never",
                    }
                }
            ),
            "false",
        ),
        (
            "exec-missing",
            lambda c, w: c["users"][0].update(
                user={
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/nonexistent/plugin",
                        "interactiveMode": "Never",
                    }
                }
            ),
            "plugin",
        ),
        (
            "insecure-skip",
            lambda c, w: (
                cluster(c).update({"insecure-skip-tls-verify": True}) or cluster(c).pop("certificate-authority-data")
            ),
            "",
        ),
        ("context-escape", lambda c, w: c.update({"current-context": f"{ESC}ctx"}), "context"),
        ("namespace-escape", lambda c, w: c["contexts"][0]["context"].update(namespace=f"{ESC}ns"), "namespace"),
        ("namespace-dotdot", lambda c, w: c["contexts"][0]["context"].update(namespace=".."), "namespace"),
    ):
        code = 0 if key == "insecure-skip" else 1
        timeout = ("--timeout", "5") if key == "server-silent" else ()
        out.append(
            Row(
                f"kubeconfig-{key}",
                (*P1, "--dry-run", *timeout),
                code,
                files={"kubeconfig": kubeconfig(change)},
                env=kc,
                expect=expect,
            )
        )
    out.append(
        Row(
            "server-silent-no-timeout-flag",
            (*P1, "--dry-run"),
            1,
            files={"kubeconfig": kubeconfig(set_server("https://127.0.0.1:{silent}"))},
            env=kc,
        )
    )
    out.append(
        Row(
            "server-silent-status",
            ("env", "status", "--env", "sweep"),
            0,
            files={
                "kubeconfig": kubeconfig(set_server("https://127.0.0.1:{silent}")),
                "state/envs/sweep/env.json": recorded_env("{ns}"),
            },
            env={**kc, "AGN_XTASK_HOME": "{tmp}/state"},
        )
    )
    # The kubeconfig env down writes: devices, symlinks, planted temporary files.
    for key, files in (
        ("char-device", {"kubeconfig": char_device}),
        ("fifo", {"kubeconfig": fifo}),
        (
            "planted-tmp-symlink",
            {"kubeconfig": kubeconfig(), "kubeconfig.tmp": symlink_to("{tmp}/../../victim/secret")},
        ),
        ("planted-lock-fifo", {"kubeconfig": kubeconfig(), "kubeconfig.lock": fifo}),
        ("symlink", {"real": kubeconfig(), "kubeconfig": symlink_to("{tmp}/real")}),
    ):
        out.append(
            Row(
                f"down-kubeconfig-{key}",
                ("env", "down", "--env", "sweep"),
                0,
                files={**files, "state/envs/sweep/env.json": recorded_env("{ns}")},
                env={**kc, "AGN_XTASK_HOME": "{tmp}/state"},
                may_change=("state/",),
            )
        )
    # Env files (read by render, up and status).
    for key, content, code in (
        ("fifo", fifo, 1),
        ("char-device", char_device, 1),
        ("zero-symlink", symlink_to("/dev/zero"), 1),
        ("huge", lambda w, tmp: "# " + "x" * (40 * 1024 * 1024) + "\n", 1),
        ("alias-bomb", alias_bomb(), 1),
        ("nested-lists", "[" * 50_000, 1),
        ("nested-maps", "{a: " * 50_000, 1),
        ("duplicate-keys", example_env() + "namespace: other\n", 1),
        ("namespace-newline", example_env(lambda d: d.update(namespace="agn-example\n")), 1),
        ("namespace-escape", example_env(lambda d: d.update(namespace=f"{ESC}x")), 1),
        ("namespace-dotdot", example_env(lambda d: d.update(namespace="..")), 1),
        ("provider-newline", example_env(lambda d: d["providers"][0].update(name="provider-one\n")), 1),
        ("provider-escape", example_env(lambda d: d["providers"][0].update(name=f"{ESC}p")), 1),
        ("provider-traversal", example_env(lambda d: d["providers"][0].update(name="../../victim")), 1),
        ("group-escape", example_env(lambda d: d["providers"][0].update(selectionGroup=f"{ESC}g")), 1),
        ("gateway-markup", example_env(lambda d: d["providers"][0].update(providerGateway="[/]")), 1),
        ("rank-overflow", example_env().replace("rank: 0", "rank: 1e400", 1), 1),
        ("rank-huge-int", example_env().replace("rank: 0", "rank: " + "9" * 5000, 1), 1),
        ("consumer-newline", example_env(lambda d: d["consumers"][0].update(name="consumer-a\n")), 1),
        ("network-traversal", example_env(lambda d: d["networks"][0].update(name="../n")), 1),
        ("name-mismatch-escape", example_env(lambda d: d.update(name=f"{ESC}x")), 1),
        (
            "many-providers",
            lambda w, tmp: example_env(
                lambda d: d.update(providers=[{**d["providers"][0], "name": f"p-{i}"} for i in range(30_000)])
            ),
            1,
        ),
        ("binary", b"\x00\x01\x02\xff", 1),
        ("tags", "!!python/object/apply:os.system ['true']\n", 1),
    ):
        for cmd in ("render", "up"):
            argv = (
                ("env", "render", "--env", "sweep")
                if cmd == "render"
                else ("env", "up", "--runtime", "local", "--env", "sweep")
            )
            out.append(Row(f"envfile-{key}-{cmd}", argv, code, files={"envs/sweep.yaml": content}, env=ENVS))
    # Env file versions: another apiVersion or kind is a usage error naming it (escaped).
    for key, change in (
        ("api-version-escape", lambda d: d.update(apiVersion=f"{ESC}v1")),
        ("api-version-list", lambda d: d.update(apiVersion=["xtask.agn.dev/v1alpha1"])),
        ("kind-markup", lambda d: d.update(kind="[/]")),
        ("kind-newline", lambda d: d.update(kind="Environment\n")),
    ):
        for argv in (("env", "render", "--env", "sweep"), ("env", "up", "--runtime", "local", "--env", "sweep")):
            content = example_env(change)
            out.append(Row(f"envfile-{key}-{argv[1]}", argv, 2, files={"envs/sweep.yaml": content}, env=ENVS))
    # Every time flag takes one duration type (xtask/durations.py).
    for flag, base in (
        ("--timeout", P1),
        ("--idle-timeout", P1),
        ("--soak", P1),
        ("--max-plan-age", P1),
        ("--expires-in", P1),
        ("--timeout", ("env", "up", "--runtime", "local")),
    ):
        for key, value in (
            ("escape", f"{ESC}5s"),
            ("huge", "9" * 400),
            ("unit", "5x"),
            ("negative", "-1s"),
            ("nan", "nan"),
            ("overflow", "1e400"),
            ("empty", ""),
            ("spaces", "1h 30m"),
        ):
            out.append(Row(f"duration-{base[1]}{flag}-{key}", (*base, flag, value), 2, expect=f"'{flag}'"))
    # Journals (drain-restore).
    for key, content, code in (
        ("fifo", fifo, 1),
        ("char-device", char_device, 1),
        ("zero-symlink", symlink_to("/dev/zero"), 1),
        ("huge", lambda w, tmp: "x" * (130 * 1024 * 1024), 1),
        ("generation-overflow", lambda w, tmp: journal(w).replace('"generation": 1', '"generation": 1e400', 1), 1),
        ("generation-nan", lambda w, tmp: journal(w).replace('"generation": 1', '"generation": NaN', 1), 1),
        (
            "generation-huge-int",
            lambda w, tmp: journal(w).replace('"generation": 1', '"generation": ' + "9" * 5000, 1),
            1,
        ),
        ("nested", lambda w, tmp: "[" * 200_000 + "\n", 1),
        ("namespace-dotdot", journal_with(namespace=".."), 1),
        ("namespace-escape", journal_with(namespace=f"{ESC}ns"), 1),
        ("namespace-newline", lambda w, tmp: journal(w, namespace=w.ns + "\n"), 1),
        ("provider-subresource", journal_with(plan=plan_of("p-three/status")), 1),
        ("provider-escape", journal_with(plan=plan_of(f"{ESC}p")), 1),
        ("provider-traversal", journal_with(plan=plan_of("../p-one")), 1),
        ("context-escape", journal_with(context=f"{ESC}ctx"), 1),
        ("operation-escape", journal_with(operation=f"{ESC}op"), 1),
    ):
        out.append(
            Row(
                f"journal-{key}", RESTORE, code, files={"j.jsonl": content}, env=kc | {"KUBECONFIG": "{tmp}/kubeconfig"}
            )
        )
    # env status renders a provider's selectionGroup and gateway from the API (escapes, markup).
    out.append(
        Row(
            "status-selection-group-escape",
            ("env", "status", "--env", "sweep"),
            0,
            files={"kubeconfig": kubeconfig(), "state/envs/sweep/env.json": recorded_env("{esc}")},
            env={**kc, "AGN_XTASK_HOME": "{tmp}/state"},
        )
    )
    return out


# -- running a row ------------------------------------------------------------------------------------
def _fill(text: str, w: World, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{ns}", w.ns)


def _make(path: Path, content: Any, w: World, tmp: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    value = content(w, tmp) if callable(content) else content
    if value is FIFO:
        os.mkfifo(path)
    elif value is DEVICE:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # a character device like /dev/null
    elif isinstance(value, Symlink):
        path.symlink_to(value.target)
    elif isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value)


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` by type and content, without opening anything that is not a regular file."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                digest = (
                    hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                    if st.st_size < 64 * 1024 * 1024
                    else str(st.st_size)
                )
                out[rel] = f"file:{oct(st.st_mode)}:{digest}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = f"special:{oct(st.st_mode)}"
    return out


CONTROL = {c for c in range(32) if c not in (9, 10)} | {127} | set(range(0x80, 0xA0))


def raw_escapes(text: str) -> bool:
    return any(ord(ch) in CONTROL for ch in text)


@dataclasses.dataclass
class Outcome:
    row: Row
    code: int | None
    seconds: float
    problems: list[str]
    message: str


def run_row(row: Row, w: World, base: Path, *, hang_after: float) -> Outcome:
    tmp = base / row.id
    victim = base / "victim"
    tmp.mkdir(parents=True)
    (tmp / "tmp").mkdir()
    (tmp / "kubeconfig").write_text(yaml.safe_dump(w.kubeconfig))
    (tmp / "journal").mkdir()
    for rel, content in row.files.items():
        path = tmp / _fill(rel, w, tmp)
        if os.path.lexists(path) and not os.path.isdir(path):
            path.unlink()
        _make(path, content, w, tmp)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env.update(
        {
            "AGN_XTASK_HOME": str(tmp / "state"),
            "KUBECONFIG": str(tmp / "kubeconfig"),
            "AGN_XTASK_JOURNAL_DIR": str(tmp / "journal"),
            "AGN_XTASK_ENVS_DIR": str(tmp / "envs"),
            "TMPDIR": str(tmp / "tmp"),
            "NO_COLOR": "1",
            "PYTHONPATH": str(REPO),
            "HOME": str(tmp / "home"),
        }
    )
    env.update({k: _fill(v, w, tmp) for k, v in row.env.items()})
    argv = [_fill(a, w, tmp) for a in row.argv]
    before_tree, before_victim, before_api = tree(tmp), tree(victim), w.snapshot()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "xtask", *argv],
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    problems = []
    try:
        out, err = proc.communicate(timeout=hang_after)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
        problems.append(f"hung (> {hang_after:.0f} s)")
    seconds = time.monotonic() - started
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if "Traceback (most recent call last)" in stderr or "Traceback (most recent call last)" in stdout:
        problems.append("traceback")
    if raw_escapes(stdout) or raw_escapes(stderr):
        problems.append("raw escape")
    if code is not None and code != row.code:
        problems.append(f"wrong exit ({code}, expected {row.code})")
    after_tree, after_victim, after_api = tree(tmp), tree(victim), w.snapshot()
    changed = sorted(
        k
        for k in before_tree.keys() | after_tree.keys()
        if before_tree.get(k) != after_tree.get(k) and not k.startswith(row.may_change)
    )
    changed += [
        f"victim/{k}"
        for k in sorted(before_victim.keys() | after_victim.keys())
        if before_victim.get(k) != after_victim.get(k)
    ]
    changed += [
        f"api:{k}" for k in sorted(before_api.keys() | after_api.keys()) if before_api.get(k) != after_api.get(k)
    ]
    if changed:
        problems.append("changed " + ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    last = (stderr.strip().splitlines() or stdout.strip().splitlines() or [""])[-1]
    return Outcome(row, code, seconds, problems, last.encode("unicode_escape").decode()[:160])


# -- main ---------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only rows whose id contains this")
    parser.add_argument("--exclude", action="append", default=[], help="skip rows whose id contains this (repeatable)")
    parser.add_argument("--hang-after", type=float, default=30.0, help="seconds before a row counts as hung")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--json", type=Path, help="also write every outcome to this file")
    args = parser.parse_args()
    selected = [r for r in rows() if args.k in r.id and not any(x in r.id for x in args.exclude)]
    if args.list:
        for r in selected:
            print(r.id)
        print(f"{len(selected)} rows", file=sys.stderr)
        return 0

    # SIGTERM unwinds like Ctrl-C, so the control plane below is stopped by the finally clause.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    from agn import kubeconfig as kcw
    from xtask.runtime.assets import ensure_assets
    from xtask.runtime.controlplane import ControlPlane

    base = Path(tempfile.mkdtemp(prefix="hostile-"))
    (base / "victim").mkdir()
    (base / "victim" / "keep").write_text("precious\n")
    cp = ControlPlane(base / "cp", ensure_assets(build=False))
    outcomes: list[Outcome] = []
    try:
        cp.start()
        path = base / "cp-kubeconfig"
        kcw.add_context(
            path,
            cp.admin_context(CTX, namespace="default"),
        )
        from xtask.crds import install_crds

        kube = Kube.from_kubeconfig(kubeconfig=str(path), context=CTX, field_manager="hostile-sweep")
        install_crds(kube)
        world = make_world(kube, path.read_text())
        for i, row in enumerate(selected, 1):
            outcome = run_row(row, world, base / "rows", hang_after=args.hang_after)
            outcomes.append(outcome)
            mark = "ok " if not outcome.problems else "BAD"
            print(
                f"[{i:3}/{len(selected)}] {mark} {row.id}: exit {outcome.code} in {outcome.seconds:.1f}s"
                + (f" — {'; '.join(outcome.problems)}" if outcome.problems else ""),
                file=sys.stderr,
                flush=True,
            )
        kube.close()
    finally:
        cp.stop()
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)
    report(outcomes)
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "id": o.row.id,
                        "code": o.code,
                        "expected": o.row.code,
                        "seconds": round(o.seconds, 2),
                        "problems": o.problems,
                        "message": o.message,
                    }
                    for o in outcomes
                ],
                indent=2,
            )
        )
    return 1 if any(o.problems for o in outcomes) else 0


KINDS = ("changed", "hung", "traceback", "raw escape", "wrong exit")


def report(outcomes: list[Outcome]) -> None:
    counts = {k: sum(any(p.startswith(k) for p in o.problems) for o in outcomes) for k in KINDS}
    clean = sum(not o.problems for o in outcomes)
    print(f"\n{len(outcomes)} hostile inputs: {clean} handled cleanly")
    print("| " + " | ".join(KINDS) + " |")
    print("|" + "---|" * len(KINDS))
    print("| " + " | ".join(str(counts[k]) for k in KINDS) + " |")
    slow = max((o.seconds for o in outcomes), default=0)
    print(f"longest row: {slow:.1f} s")
    for o in outcomes:
        if o.problems:
            print(f"- {o.row.id}: {'; '.join(o.problems)} :: {o.message}")


if __name__ == "__main__":
    sys.exit(main())
