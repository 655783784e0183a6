"""A gateway of the release before network shards (the parent of the commit that added
``agn/netshards.py``), run as a real process from its own checkout, refuses the network form the
operator writes now rather than misread it: it keeps serving the per-consumer revision it had,
whole, through the migration and a drain, and one started on the new form serves nothing; each
says so in its log and its consumer's status. The upgrade order docs/overlays.md gives
(gateways first, then the operator) rests on this.

The checkout is a detached ``git worktree`` of that commit, made once per session and removed
afterwards; the test skips, saying why, only where the repository has no git history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_network_shards_operator import PROBES, start, write_previous_form
from test_operator import overlay, set_drain
from test_overlay_shards_operator import index_of, own_shards_of

from agn.kube import CONSUMERS, SHARDS
from agnprocs import http_json, wait_for
from xtask.procs import CommandFailed, RealCmdRunner

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INTRODUCED = "agn/netshards.py"  # the network form came with this file


def git(*args: str, check: bool = True):
    return RealCmdRunner().run(["git", "-C", str(REPO), *args], check=check, timeout=120)


def commit_before_network_shards() -> str:
    """The parent of the commit that added :data:`INTRODUCED`; skips where git or history is missing."""
    try:
        added = git("log", "--diff-filter=A", "--format=%H", "--", INTRODUCED, check=False)
    except CommandFailed as exc:
        pytest.skip(f"git cannot run here ({exc}): the previous release's gateway cannot be checked out")
    if added.returncode != 0 or not added.stdout.split():
        pytest.skip(f"no git history of {INTRODUCED} in {REPO} (not a clone, or a shallow one)")
    parent = git("rev-parse", "--verify", f"{added.stdout.split()[-1]}^", check=False)
    if parent.returncode != 0:
        pytest.skip(f"the commit that added {INTRODUCED} has no parent in this (shallow) history")
    return parent.stdout.strip()


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory) -> Path:
    """A checkout of the release before network shards, once per session."""
    commit = commit_before_network_shards()
    root = tmp_path_factory.mktemp("previous-release") / commit[:12]
    git("worktree", "add", "--detach", str(root), commit)
    try:
        assert not (root / INTRODUCED).exists() and (root / "agn" / "gateway" / "__main__.py").is_file()
        yield root
    finally:
        git("worktree", "remove", "--force", str(root), check=False)


def routes(gateway: str) -> tuple[int | None, dict[str, str]]:
    got = http_json(f"{gateway}/routes")
    return got["servingRevision"], {c["provider"]: c["admission_state"] for c in got["candidates"]}


def rejected(log: str, revision: int) -> bool:
    """The gateway's log has refused ``revision`` for naming shards that are not its consumer's
    (the network shards: what the release before them says of the network form)."""
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the supervisor's "starting" line
        if entry.get("msg") == "overlay_rejected" and entry.get("revision") == revision:
            return any("-netshard-" in p and "is not a shard of consumer" in p for p in entry.get("problems", []))
    return False


def test_a_gateway_before_network_shards_refuses_the_new_form_and_keeps_what_it_served(
    kube, namespace, agn, previous_release
):
    names = [f"p{i:02d}" for i in range(20)]
    start(kube, namespace, agn, names, {"c1": (), "c2": ("p07",)})
    wholes = {c: overlay(kube, namespace, c) for c in ("c1", "c2")}
    agn.stop("operator")
    # The env as the previous release left it, and its gateway serving it.
    for o in kube.list(SHARDS, namespace)[0]:
        kube.delete(SHARDS, namespace, o["metadata"]["name"])
    for c, whole in wholes.items():
        write_previous_form(kube, namespace, c, whole)
    old = agn.gateway("c2", code=previous_release)
    revision = wholes["c2"]["revision"]
    served = {c["provider"]: c["admission_state"] for c in wholes["c2"]["candidates"]}
    wait_for(lambda: routes(old) == (revision, served), what="the previous gateway serving the per-consumer form")

    # The operator upgraded first (the wrong order): it rewrites c2's index in the network form.
    agn.operator(*PROBES, name="operator-2")
    wait_for(
        lambda: (
            index_of(kube, namespace, "c2")["spec"].get("formatVersion") == 2
            and not own_shards_of(kube, namespace, "c2")
        ),
        timeout=60,
        what="c2's index in the network form",
    )
    wait_for(lambda: rejected(agn.log("gateway-c2"), revision), timeout=30, what="the network-form index refused")
    assert routes(old) == (revision, served)  # what it had, whole

    set_drain(kube, namespace, "p03", True)  # a new revision, in the network form only
    wait_for(lambda: index_of(kube, namespace, "c2")["spec"]["revision"] == revision + 1, what="c2 revision + 1")
    wait_for(lambda: rejected(agn.log("gateway-c2"), revision + 1), timeout=30, what="the new revision refused")
    assert routes(old) == (revision, served)  # p03 still admitted: never a misread overlay
    status = kube.get(CONSUMERS, namespace, "c2").get("status") or {}
    assert status.get("servingRevision") == revision and status.get("acceptedRevision") == revision
    assert f"rejected overlay revision {revision + 1}" in status.get("message", "")

    # A gateway of that release started on the new form serves nothing.
    late = agn.gateway("c1", code=previous_release)
    wait_for(lambda: rejected(agn.log("gateway-c1"), wholes["c1"]["revision"] + 1), what="c1's index refused")
    assert routes(late) == (None, {})
    assert "Traceback" not in agn.log("gateway-c1") + agn.log("gateway-c2")
