"""The chaos soak's environment: the example env's names, the CLI as a subprocess (one per
identity), plain reads of the API, the overlay poller and the traffic (see chaos.py)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = "example"
CTX = "local-example"
NS = "agn-example"
GROUP, VERSION = "agn.dev", "v1alpha1"
NETWORK = "production"
CONSUMERS = ("consumer-a", "consumer-b")
PROVIDERS = {  # provider -> (providerGateway, selectionGroup), as envs/example.yaml has them
    "provider-one": ("provider-a", "chat"),
    "provider-two": ("provider-a", "embeddings"),
    "provider-three": ("provider-b", "chat"),
    "provider-four": ("provider-b", "embeddings"),
}
GATEWAYS = {gw: sorted(p for p, (g, _) in PROVIDERS.items() if g == gw) for gw in ("provider-a", "provider-b")}
TARGETS = ["--network", NETWORK, *(a for c in CONSUMERS for a in ("--consumer", c))]
PROCESSES = (
    "operator",
    "gateway-consumer-a",
    "gateway-consumer-b",
    *(f"fake-{p}" for p in PROVIDERS),
    "kube-apiserver",
    "etcd",
)
MIDRUN = ("operator", "gateway-consumer-a", "gateway-consumer-b", "kube-apiserver", "etcd")
HEAL_BOUND = 60.0
STORED = {0, 6, 7, 9}  # exit codes after which the request is stored
UNCHANGED = {3, 4}  # refused before any write, or restored by the run itself


# -- the CLI and the env's processes --------------------------------------------------------------


def default_hangup() -> None:
    """In every CLI the soak starts: SIGHUP at its default disposition, as a terminal session
    starts it. A run started with SIGHUP ignored (the soak itself under ``nohup``) keeps it
    ignored by design, and the SIGHUP faults would not reach it."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Env:
    """The CLI as a user runs it (a subprocess with its own state, kubeconfig and journals).
    ``kubeconfig``/``journals``: another identity's (the second maintainer's)."""

    def __init__(self, home: Path, *, kubeconfig: Path | None = None, journals: Path | None = None) -> None:
        self.home = home
        self.state = home / "state" / "envs" / ENV
        self.journals = journals or home / "journal"
        self.audit_log = home / "audit.log"
        self.env = {
            **os.environ,
            "AGN_XTASK_HOME": str(home / "state"),
            "KUBECONFIG": str(kubeconfig or home / "kubeconfig"),
            "AGN_XTASK_JOURNAL_DIR": str(self.journals),
            "AGN_XTASK_AUDIT_LOG": str(self.audit_log),  # read by kube-apiserver's start (env up)
            "NO_COLOR": "1",
            "PYTHONPATH": str(REPO),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "xtask", *args]

    def run(self, *args: str, timeout: float = 300) -> tuple[int, str]:
        try:
            proc = subprocess.run(
                self.argv(*args),
                capture_output=True,
                text=True,
                cwd=REPO,
                env=self.env,
                timeout=timeout,
                preexec_fn=default_hangup,
            )
        except subprocess.TimeoutExpired as exc:
            said = b"".join(x if isinstance(x, bytes) else (x or "").encode() for x in (exc.stdout, exc.stderr))
            return -999, f"timed out after {timeout}s: {said.decode(errors='replace')}"
        return proc.returncode, proc.stdout + proc.stderr

    def spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=self.env,
            preexec_fn=default_hangup,
        )

    def status(self) -> dict | None:
        code, out = self.run("env", "status", "--output", "json", timeout=60)
        try:
            return json.loads(out[out.index("{") :]) if code == 0 else None
        except ValueError:
            return None

    def pid(self, name: str) -> int | None:
        """The pid in ``name``'s pid file, if that process still runs (same start time)."""
        try:
            rec = json.loads((self.state / "run" / f"{name}.pid.json").read_text())
            stat = Path(f"/proc/{rec['pid']}/stat").read_text()
        except (OSError, ValueError, KeyError):
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" or int(fields[19]) != rec.get("start_ticks", int(fields[19])):
            return None
        return int(rec["pid"])

    def port(self, name: str) -> int | None:
        try:
            return json.loads((self.state / "ports.json").read_text()).get(name)
        except (OSError, ValueError):
            return None

    def journal_files(self) -> set[Path]:
        return set(self.journals.glob("drain-*.json*")) if self.journals.exists() else set()


# -- plain reads of the API ---------------------------------------------------------------------


class Api:
    """The plain ``kubernetes`` client, on the env's kubeconfig, every call bounded."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.objects = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig), context=CTX))

    def items(self, plural: str) -> list[dict]:
        return self.objects.list_namespaced_custom_object(GROUP, VERSION, NS, plural, _request_timeout=3)["items"]

    def drains(self) -> dict[str, bool]:
        return {p: flag for p, (flag, _) in self.holds().items()}

    def holds(self) -> dict[str, tuple[bool, frozenset[str]]]:
        """provider -> (its drain flag, the owners of its holds)."""
        out = {}
        for p in self.items("inferenceproviders"):
            ann = p["metadata"].get("annotations") or {}
            owners = frozenset(v for k, v in ann.items() if k.startswith("owners.drain.agn.dev/"))
            out[p["metadata"]["name"]] = (bool((p["spec"].get("trafficPolicy") or {}).get("drain")), owners)
        return out

    def declare_budget(self, max_unavailable: int) -> None:
        """``spec.disruptionBudget`` on the network, as its owner declares it."""
        body = {"spec": {"disruptionBudget": {"maxUnavailable": max_unavailable}}}
        self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "inferencenetworks", NETWORK, body, _request_timeout=5
        )

    def view(self) -> dict[str, dict]:
        """Per consumer: index revision, candidates (None unless every shard matches), statuses."""
        consumers = {c["metadata"]["name"]: c.get("status") or {} for c in self.items("inferenceconsumers")}
        indexes = {o["metadata"]["name"]: o["spec"] for o in self.items("routingoverlays")}
        shards = {s["metadata"]["name"]: s["spec"] for s in self.items("routingoverlayshards")}
        out = {}
        for name, index in indexes.items():
            out[name] = {
                "revision": index.get("revision"),
                "candidates": candidates_of(index, shards),
                "accepted": consumers.get(name, {}).get("acceptedRevision"),
                "serving": consumers.get(name, {}).get("servingRevision"),
            }
        return out

    def set_rank(self, provider: str, rank: int) -> None:
        self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "inferenceproviders", provider, {"spec": {"rank": rank}}, _request_timeout=5
        )


def candidates_of(index: dict, shards: dict[str, dict]) -> dict[str, tuple[str, str]] | None:
    """candidate id -> (provider, admission state) of the index's revision, or None when some
    shard it names is missing or at another digest (the revision cannot be read whole now). An
    index in the network form (formatVersion 2) names its network's shards, shared with the
    network's other consumers, and the candidate ids it ``excluded``."""
    if "shards" not in index:
        return {c["id"]: (c["provider"], c["admission_state"]) for c in index.get("candidates") or []}
    excluded = set(index.get("excluded") or ()) if index.get("formatVersion") == 2 else set()
    out = {}
    for entry in index["shards"]:
        shard = shards.get(entry["name"])
        if shard is None or shard.get("digest") != entry.get("digest"):
            return None
        out.update(
            {
                c["id"]: (c["provider"], c["admission_state"])
                for c in shard.get("candidates") or []
                if c["id"] not in excluded
            }
        )
    return out


class Poller:
    """Records every overlay revision it sees whole (index + matching shards), per consumer."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.history: dict[str, dict[int, dict]] = collections.defaultdict(dict)
        self.first_seen: dict[tuple[str, int], float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.15):
            with contextlib.suppress(Exception):  # the API server is down on purpose at times
                self.record(self.api.view(), time.monotonic())

    def record(self, view: dict[str, dict], now: float) -> None:
        with self.lock:
            for consumer, v in view.items():
                rev = v["revision"]
                self.first_seen.setdefault((consumer, rev), now)
                if v["candidates"] is not None:
                    self.history[consumer].setdefault(rev, v["candidates"])

    def revision_at(self, consumer: str, rev: int) -> dict | None:
        with self.lock:
            return self.history[consumer].get(rev)

    def newest_before(self, consumer: str, t: float) -> int | None:
        with self.lock:
            seen = [r for (c, r), at in self.first_seen.items() if c == consumer and at <= t]
        return max(seen, default=None)


# -- traffic ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    sent: float
    consumer: str
    session: str
    new: bool
    code: int
    provider: str | None = None
    candidate: str | None = None
    revision: int | None = None
    routing: str | None = None


class Traffic:
    """Sticky and new-session requests through one gateway at a bounded rate."""

    def __init__(self, env: Env, consumer: str, rate: float, seed: int) -> None:
        self.env, self.consumer, self.rate = env, consumer, rate
        self.rng = random.Random(f"{seed}:traffic:{consumer}")
        groups = (None, "chat", "embeddings")
        self.sticky = [(f"{consumer}-sticky-{i}", groups[i % 3]) for i in range(12)]
        self.replies: list[Reply] = []
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(1.0 / self.rate):
            new = self.rng.random() < 0.5
            session, group = (
                (f"new-{uuid.uuid4().hex[:12]}", self.rng.choice((None, "chat", "embeddings")))
                if new
                else self.rng.choice(self.sticky)
            )
            reply = self.send(session, group, new)
            if reply is None:
                self.errors += 1
            else:
                self.replies.append(reply)

    def send(self, session: str, group: str | None, new: bool) -> Reply | None:
        port = self.env.port(f"gateway-{self.consumer}")
        if port is None:
            return None
        sent = time.monotonic()
        headers = {"content-type": "application/json", "x-session-id": session}
        if group:
            headers["x-selection-group"] = group
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("POST", "/v1/completions", body=b'{"prompt": "chaos"}', headers=headers)
            resp = conn.getresponse()
            body = json.loads(resp.read() or b"{}")
            rev = resp.getheader("x-agn-overlay-revision")
        except (OSError, ValueError, http.client.HTTPException):
            return None
        finally:
            conn.close()
        return Reply(
            sent,
            self.consumer,
            session,
            new,
            resp.status,
            resp.getheader("x-agn-provider"),
            body.get("candidateId"),
            int(rev) if rev else None,
            body.get("routing"),
        )
