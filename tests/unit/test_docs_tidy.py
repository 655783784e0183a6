"""The docs are a map the repo checks (in the spirit of rust-analyzer's ``tidy.rs``): every file
path, flag, exit code and AGN resource that a doc names must exist.

The docs are README.md, manifests/README.md and every Markdown file under docs/. What counts:

- **paths**: a backticked word that starts with one of the repo's top-level folders (``xtask/``,
  ``agn/``, ``tests/``, ``scripts/``, ``docs/``, ``manifests/``, ``envs/``, ``schemas/``,
  ``.ci/``) or is a top-level file, and links ``[..](docs/x.md)``; a ``::name`` suffix, a
  ``:LINE`` suffix, ``*`` globs and ``<placeholder>`` parts are allowed;
- **flags**: ``--flag`` anywhere in backticks or code blocks must be a flag some program of the
  repo takes (the CLI's click tree, the operator's, gateway's and fake provider's parsers, the
  scripts' and test harnesses' argparse and shell options: any ``"--flag"`` string literal in
  the repo's code), or
  a flag of a tool the docs show (kubectl, pytest, kind, docker, podman, pip, go, curl, prometheus),
  listed below;
- **exit codes**: a table row ``| N | meaning |`` under an "Exit codes" heading and every
  "exit N" must be an :class:`xtask.errors.ExitCode` (a fake provider's or a tool's own exit
  statuses are not written that way);
- **resources**: the word after ``kubectl get``/``describe`` must be a served name of an AGN CRD
  (plural, singular, kind, short name or category) or a core resource the docs use.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    REPO / "README.md",
    REPO / "ARCHITECTURE.md",
    REPO / "manifests" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]
TOP = ("xtask/", "agn/", "tests/", "scripts/", "docs/", "manifests/", "envs/", "schemas/", ".ci/")
TOP_FILES = {"pyproject.toml", "README.md", "ARCHITECTURE.md", "Dockerfile", ".dockerignore", ".gitignore"}

# Flags of other tools that the docs show in commands.
TOOL_FLAGS = {
    # pytest-kind's, honoured by the kind suite (tests/kind/conftest.py)
    "--cluster-name",
    "--keep-cluster",
    # kubectl
    "--context",
    "--kubeconfig",
    "--namespace",
    "--server-side",
    "--field-manager",
    "--dry-run",
    "--for",
    "--timeout",
    "--type",
    "--patch",
    "--selector",
    "--output",
    "--all",
    "--watch",
    "--show-labels",
    "--sort-by",
    "--field-selector",
    "--subresource",
    "--raw",
    "--force-conflicts",
    "--image",
    "--name",
    "--all-namespaces",
    "--no-headers",
    "--template",
    "--clusterrole",
    "--as",
    # pytest
    "--lf",
    "--co",
    "--durations",
    "--maxfail",
    # pip, go, docker/podman, kind, curl, prometheus
    "--quiet",
    "--upgrade",
    "--editable",
    "--privileged",
    # systemd-run (docs/provider-drain.md, "Long maintenance")
    "--unit",
    "--ulimit",
    "--systemd",
    "--cgroupns",
    "--oom-score-adj",
    "--rm",
    "--cap-drop",
    "--memory",
    "--security-opt",
    "--tmpfs",
    "--user",
    "--network",
    "--read-only",
    "--config",
    "--retain",
    "--silent",
    "--fail",
    "--data-urlencode",
    "--web.listen-address",
    "--version",
    "--help",
    "--trimpath",
    "--ldflags",
    "--storage.tsdb.path",
    "--config.file",
}
CORE_RESOURCES = {
    "pods",
    "pod",
    "deployments",
    "deployment",
    "deploy",
    "services",
    "svc",
    "events",
    "event",
    "namespaces",
    "ns",
    "leases",
    "lease",
    "crd",
    "crds",
    "customresourcedefinitions",
    "nodes",
    "serviceaccounts",
    "roles",
    "rolebindings",
    "clusterroles",
    "clusterrolebindings",
    "all",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "secrets",
    "configmaps",
}


def _docs() -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in DOCS if p.exists()]


def _code_spans(text: str) -> list[str]:
    """Inline code spans and fenced code blocks."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    rest = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def _rel(doc: Path) -> str:
    return str(doc.relative_to(REPO))


def _path_exists(word: str) -> bool:
    word = word.split("::")[0]
    word = re.sub(r":\d+(-\d+)?$", "", word).rstrip(".,;:)")
    if "<" in word or "{" in word or "$" in word:
        word = re.split(r"[<{$]", word)[0]
        word = word[: word.rfind("/") + 1] if "/" in word else word
    if "*" in word:
        return any(REPO.glob(word))
    return (REPO / word).exists()


def test_every_path_a_doc_names_exists():
    missing = []
    for doc, text in _docs():
        words = set()
        for span in _code_spans(text):
            for word in re.split(r"[\s'\"=(),]+", span):
                if word.startswith(TOP) or word in TOP_FILES:
                    words.add(word)
        for link in re.findall(r"\]\(([^)#\s]+)", text):
            if not link.startswith(("http://", "https://", "mailto:")):
                target = (doc.parent / link).resolve()
                if not target.exists():
                    missing.append(f"{_rel(doc)}: link {link}")
        missing += [f"{_rel(doc)}: {w}" for w in sorted(words) if not _path_exists(w)]
    assert not missing, "docs name paths that do not exist:\n" + "\n".join(missing)


def _repo_flags() -> set[str]:
    flags: set[str] = set()
    for folder in ("xtask", "agn", "scripts", "tests/harness", ".ci"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") or (path.parent.name == ".ci" and path.is_file()):
                flags.update(re.findall(r"(--[a-z][a-z0-9-]*)", path.read_text(errors="replace")))
    # The operator's, gateway's and fake provider's flags are derived from their settings dataclasses.
    from agn.flags import build_parser
    from agn.settings_doc import PROGRAMS

    for _title, prog, _source, cls in PROGRAMS:
        flags.update(o for a in build_parser(cls, prog=prog, description=None)._actions for o in a.option_strings)
    return flags


def test_every_flag_a_doc_names_exists():
    known = _repo_flags() | TOOL_FLAGS
    unknown = []
    for doc, text in _docs():
        for span in _code_spans(text):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])", span):
                if flag not in known:
                    unknown.append(f"{_rel(doc)}: {flag}")
    assert not unknown, "docs name flags no program here takes:\n" + "\n".join(sorted(set(unknown)))


def test_every_exit_code_a_doc_names_exists():
    from xtask.errors import ExitCode

    codes = {int(c) for c in ExitCode}
    wrong = []
    for doc, text in _docs():
        for match in re.finditer(r"\bexit (?:code |status )?(\d+)\b", text):
            if int(match.group(1)) not in codes:
                wrong.append(f"{_rel(doc)}: {match.group(0)}")
    assert not wrong, "docs name exit codes xtask does not have:\n" + "\n".join(wrong)


def _crd_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "manifests" / "crds").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            n = doc["spec"]["names"]
            names |= {n["plural"], n.get("singular", ""), n["kind"].lower(), *n.get("shortNames", [])}
            names |= set(n.get("categories", []))
            names |= {f"{x}.{doc['spec']['group']}" for x in (n["plural"], n.get("singular", ""))}
    return names - {""}


def test_every_resource_a_doc_gets_exists():
    served = _crd_names() | CORE_RESOURCES
    wrong = []
    for doc, text in _docs():
        for span in _code_spans(text):
            for match in re.finditer(
                r"kubectl(?: [-\w=./]+)*? (?:get|describe|wait|delete|patch|edit) ([a-z][\w.,-]*)", span
            ):
                for name in match.group(1).split(","):
                    name = name.split("/")[0]
                    if name and name not in served:
                        wrong.append(f"{_rel(doc)}: kubectl ... {name}")
    assert not wrong, "docs name resources that are not served:\n" + "\n".join(sorted(set(wrong)))


@pytest.mark.parametrize("doc", [p for p in DOCS if p.name == "README.md" and p.parent == REPO])
def test_the_readme_is_a_map(doc: Path):
    """At most 250 lines, the map (ARCHITECTURE.md and the "to change X, edit Y" table) before any
    measurement, and it links every page under docs/."""
    text = doc.read_text()
    assert len(text.splitlines()) <= 250, f"README.md has {len(text.splitlines())} lines"
    assert "(ARCHITECTURE.md)" in text.split("## Quickstart")[0], "ARCHITECTURE.md is linked before the quickstart"
    assert text.index("to change X, edit Y") < text.index("## Measured"), "the map comes before the measurements"
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    unlinked = [p for p in pages if f"({p}" not in text]
    assert not unlinked, f"README.md does not link {unlinked}"
