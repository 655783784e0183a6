"""kube-apiserver's audit log of InferenceProvider writes is opt-in (``AGN_XTASK_AUDIT_LOG``):
off by default; on, the policy file is written beside the state and the flags name it."""

from __future__ import annotations

import yaml

from xtask.runtime.controlplane import AUDIT_LOG_ENV, audit_args


def test_no_audit_log_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(AUDIT_LOG_ENV, raising=False)
    assert audit_args(tmp_path) == []
    assert not (tmp_path / "audit-policy.yaml").exists()


def test_an_audit_log_of_provider_writes_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv(AUDIT_LOG_ENV, str(tmp_path / "audit.log"))
    args = audit_args(tmp_path)
    assert f"--audit-log-path={tmp_path / 'audit.log'}" in args
    assert f"--audit-policy-file={tmp_path / 'audit-policy.yaml'}" in args
    policy = yaml.safe_load((tmp_path / "audit-policy.yaml").read_text())
    assert policy["rules"][0]["resources"] == [{"group": "agn.dev", "resources": ["inferenceproviders"]}]
    assert policy["rules"][-1] == {"level": "None"}
