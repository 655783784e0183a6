"""Kubernetes name rules (agn.names) and the argparse types of the AGN programs built on them."""

from __future__ import annotations

import argparse

import pytest

from agn.argtypes import namespace_name, object_name
from agn.names import is_label, is_subdomain

LABELS = ["a", "0", "agn-example", "a" * 63, "a-b-c", "9lives"]
NOT_LABELS = ["", ".", "..", "a.b", "A", "a_b", "-a", "a-", "a" * 64, "a\n", "a\r", "a/b", "a%2Fb", " a", "é"]
SUBDOMAINS = ["a", "a.b", "p-one.v2", "a" * 253, ("a" * 63 + ".") * 3 + "a"]
NOT_SUBDOMAINS = ["", ".", "..", ".a", "a.", "a..b", "a" * 254, "p/status", "p%2Fstatus", "P", "p\n", None, 5]


@pytest.mark.parametrize("name", LABELS)
def test_labels(name):
    assert is_label(name) and is_subdomain(name)
    assert namespace_name(name) == name


@pytest.mark.parametrize("name", NOT_LABELS)
def test_not_labels(name):
    assert not is_label(name)
    with pytest.raises(argparse.ArgumentTypeError, match="must be a DNS-1123 label"):
        namespace_name(name)


@pytest.mark.parametrize("name", SUBDOMAINS)
def test_subdomains(name):
    assert is_subdomain(name)
    assert object_name(name) == name


@pytest.mark.parametrize("name", NOT_SUBDOMAINS)
def test_not_subdomains(name):
    assert not is_subdomain(name)
    if isinstance(name, str):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a DNS-1123 subdomain"):
            object_name(name)
