"""The embedded control plane's ports (xtask/runtime/controlplane.py): three different ones, even
when the kernel hands a released port out twice in a row. An etcd on kube-apiserver's port would
answer its /readyz (etcd serves one, with the same CA) and then a bare 404 to every API path."""

from __future__ import annotations

import json

from xtask.runtime import controlplane
from xtask.runtime.controlplane import ControlPlane, Ports


def handing_out(monkeypatch, *ports: int) -> None:
    given = iter(ports)
    monkeypatch.setattr(controlplane, "free_port", lambda: next(given))


def test_a_port_handed_out_twice_is_not_used_twice(tmp_path, monkeypatch):
    handing_out(monkeypatch, 40001, 40001, 40003, 40001, 40003, 40005)
    assert ControlPlane(tmp_path)._allocate_ports() == Ports(40001, 40003, 40005)
    assert json.loads((tmp_path / "controlplane.json").read_text()) == {
        "etcd_client": 40001,
        "etcd_peer": 40003,
        "apiserver": 40005,
    }


def test_a_new_port_is_never_one_the_recorded_ports_keep(tmp_path, monkeypatch):
    """The recorded etcd ports are kept when free: a new kube-apiserver port may not be one of them."""
    (tmp_path / "controlplane.json").write_text(json.dumps({"etcd_client": 1, "etcd_peer": 2, "apiserver": 3}))
    monkeypatch.setattr(controlplane, "port_free", lambda port: port in (1, 2))  # the old apiserver's is taken
    handing_out(monkeypatch, 1, 40002, 2, 3, 40004, 40006)
    assert ControlPlane(tmp_path)._allocate_ports() == Ports(1, 2, 40006)


def test_a_recorded_kube_apiserver_port_that_is_etcds_is_not_reused(tmp_path, monkeypatch):
    """A record with kube-apiserver on etcd's client port (an older version could write one) gets
    kube-apiserver a port of its own; etcd keeps its recorded ones."""
    (tmp_path / "controlplane.json").write_text(json.dumps({"etcd_client": 1, "etcd_peer": 2, "apiserver": 1}))
    monkeypatch.setattr(controlplane, "port_free", lambda port: True)
    handing_out(monkeypatch, 40002, 40004, 40006)
    assert ControlPlane(tmp_path)._allocate_ports() == Ports(1, 2, 40006)
