"""When a Deployment counts as rolled out (``env up`` on a cluster) and as healthy (``env status``)."""

from __future__ import annotations

import pytest

from xtask.runtime.deployments import component, rollout_failed, rollout_problem


def deployment(*, generation=2, observed=2, replicas=1, updated=1, available=1, ready=1, conditions=()):
    return {
        "metadata": {"name": "agn-operator", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "readyReplicas": ready,
            "conditions": list(conditions),
        },
    }


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({}, None),
        ({"observed": 1}, "its controller has not seen the new spec yet"),
        ({"updated": 0}, "0/1 replicas updated"),
        ({"replicas": 3, "updated": 3, "available": 2}, "2/3 replicas available"),
    ],
)
def test_rollout_problem(changes, problem):
    assert rollout_problem(deployment(**changes)) == problem


def test_a_deployment_no_controller_has_seen_is_not_rolled_out():
    """What an API server without a kube-controller-manager shows forever."""
    bare = {"metadata": {"name": "x", "generation": 1}, "spec": {"replicas": 1}}
    assert rollout_problem(bare) == "its controller has not seen the new spec yet"


def test_progress_deadline_is_terminal():
    stuck = deployment(
        updated=0,
        conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "m"}],
    )
    assert rollout_failed(stuck) == "m" and rollout_failed(deployment()) is None


def test_component_entry():
    entry = component(deployment(ready=0), "ns")
    assert (entry["running"], entry["healthy"], entry["replicas"]) == (False, False, "0/1")
    assert entry["metricsUrl"] == "http://agn-operator.ns.svc:8080/metrics"
