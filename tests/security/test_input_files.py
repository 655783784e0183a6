"""Input files a user names are regular files of bounded size, parsed strictly: FIFOs, devices,
huge files, YAML alias bombs, deep nesting, duplicate keys and out-of-range journal numbers are
each one clear line naming the file, exit 1, no traceback, no hang.

The CLI runs as a subprocess with a memory cap (an alias bomb or ``/dev/zero`` must not take
the machine's memory) and a timeout far above what a refusal takes (a hang fails the test).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

from agn import kubeconfig as kc
from agn.inputfile import JOURNAL_LIMIT, YAML_INPUT_LIMIT, InputFileError, read_regular
from agn.kube import ConfigError
from agn.yamltext import MAX_DEPTH, YamlProblem, parse_yaml
from envcli import REPO, run_xtask
from xtask.drain.edges.journal import JournalError, read_journal, replay

pytestmark = pytest.mark.e2e

MEMORY_CAP = 2 * 1024**3
HANG = 60  # seconds: each refusal takes well under one; only a hang gets near this

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(ord('b') + i)}: &{chr(ord('b') + i)} [{', '.join(['*' + chr(ord('a') + i)] * 10)}]\n" for i in range(8)
)
EXAMPLE_ENV = (REPO / "envs" / "example.yaml").read_text()


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def xtask(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_xtask(*args, env=env, timeout=HANG, preexec_fn=_cap_memory)


def assert_refused(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "envs").mkdir()
    return {
        "AGN_XTASK_HOME": str(tmp_path / "state"),
        "AGN_XTASK_ENVS_DIR": str(tmp_path / "envs"),
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "AGN_XTASK_JOURNAL_DIR": str(tmp_path / "journal"),
    }


def render(home: dict[str, str]) -> subprocess.CompletedProcess:
    return xtask("env", "render", "--env", "example", env=home)


def env_file(home: dict[str, str]) -> Path:
    return Path(home["AGN_XTASK_ENVS_DIR"]) / "example.yaml"


def journal_header(**fields) -> str:
    header = {
        "type": "header",
        "format": "agn.dev/drain-journal/v2",
        "operation": "op",
        "context": "local-x",
        "namespace": "ns",
        "request": "drain",
        "reason": None,
        "startedAt": "",
        "plan": [{"provider": "p-one", "previous": None, "previousAnnotations": {}, "resourceVersion": "1"}],
    }
    header.update(fields)
    return json.dumps(header) + "\n"


# -- FIFOs, devices and huge files --------------------------------------------------------------------


def test_a_fifo_env_file_is_refused_without_blocking(home):
    os.mkfifo(env_file(home))
    assert_refused(render(home), f"{env_file(home)}: is a FIFO (named pipe), not a regular file")


def test_dev_zero_as_env_file_is_refused_not_read(home):
    env_file(home).symlink_to("/dev/zero")
    assert_refused(render(home), f"{env_file(home)}: is a character device, not a regular file")


def test_a_huge_env_file_is_refused_unread(home):
    with env_file(home).open("wb") as f:
        f.truncate(YAML_INPUT_LIMIT + 1)  # sparse: costs no disk
    assert_refused(render(home), f"{env_file(home)}: is too large: {YAML_INPUT_LIMIT + 1} bytes")


def test_a_fifo_kubeconfig_is_refused_without_blocking(home, tmp_path):
    os.mkfifo(home["KUBECONFIG"])
    proc = xtask("env", "provider-drain", "--provider", "p-one", "--dry-run", env=home)
    assert_refused(proc, f"kubeconfig {home['KUBECONFIG']}: is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_a_journal_that_is_not_a_regular_file_is_refused(home, tmp_path, target):
    journal = tmp_path / "j.jsonl"
    if target == "fifo":
        os.mkfifo(journal)
    else:
        journal.symlink_to(target)
    proc = xtask("env", "drain-restore", str(journal), env=home)
    assert_refused(proc, f"{journal}: cannot read the drain journal: is a")
    assert "not a regular file" in proc.stderr


def test_a_huge_journal_is_refused_unread(tmp_path):
    journal = tmp_path / "j.jsonl"
    with journal.open("wb") as f:
        f.truncate(JOURNAL_LIMIT + 1)
    with pytest.raises(JournalError, match="is too large"):
        read_journal(journal)


def test_the_reader_never_reads_past_the_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    assert read_regular(path, limit=11) == b"x" * 11
    with pytest.raises(InputFileError, match="is too large: 11 bytes, the limit is 10 bytes"):
        read_regular(path, limit=10)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", limit=10)


# -- YAML: aliases, nesting, duplicate keys -----------------------------------------------------------
def test_an_alias_bomb_env_file_is_refused_at_the_first_alias(home):
    env_file(home).write_text(BOMB)
    assert_refused(render(home), f"{env_file(home)}: refused (line 2, column 8: aliases (*a) are not accepted")


def test_an_integer_too_long_to_convert_is_refused_where_it_is_written(home):
    """Python refuses int() of more than 4,300 digits with a ValueError that names no place."""
    example = (REPO / "envs" / "example.yaml").read_text()
    env_file(home).write_text(example.replace("rank: 0", "rank: " + "9" * 5000, 1))
    assert_refused(render(home), f"{env_file(home)}: refused (line ")
    assert "an integer of 5000 digits" in render(home).stderr


def test_an_alias_bomb_kubeconfig_is_refused(home):
    Path(home["KUBECONFIG"]).write_text(BOMB)
    proc = xtask("env", "provider-drain", "--provider", "p-one", "--dry-run", env=home)
    assert_refused(proc, f"kubeconfig {home['KUBECONFIG']}: refused (line 2, column 8: aliases (*a)")


@pytest.mark.parametrize("text", ["[" * 50_000, "- " * 2000 + "x"])
def test_deep_nesting_is_a_clear_error(home, text):
    env_file(home).write_text(text)
    assert_refused(render(home), f"nested more than {MAX_DEPTH} levels deep")


def test_deep_nesting_in_a_kubeconfig(tmp_path):
    path = tmp_path / "config"
    path.write_text("clusters: " + "[" * 50_000)
    with pytest.raises(ConfigError, match=f"kubeconfig {path}: refused .*nested more than {MAX_DEPTH} levels deep"):
        kc.load(str(path))


def test_duplicate_keys_in_an_env_file_name_the_key_and_both_lines(home):
    env_file(home).write_text(EXAMPLE_ENV + "namespace: other\n")
    first = 1 + EXAMPLE_ENV.splitlines().index(next(x for x in EXAMPLE_ENV.splitlines() if x.startswith("namespace:")))
    line = len(EXAMPLE_ENV.splitlines()) + 1
    assert_refused(render(home), f"(line {line}, column 1: duplicate key 'namespace' (first at line {first}))")


def test_duplicate_keys_nested_and_in_flow_style():
    with pytest.raises(YamlProblem, match=r"line 1, column 11: duplicate key 'b' \(first at line 1\)"):
        parse_yaml("a: {b: 1, b: 2}")
    assert parse_yaml("<<: {a: 1}\na: 2\n") == {"a": 2}  # a merge key is not a duplicate
    # Anchors without aliases, and nesting up to the bound, still load.
    assert parse_yaml("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}
    nested = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_yaml(nested)["x"] is not None


# -- journal numbers ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, message",
    [
        ('{"type": "done", "provider": "p-one", "generation": 1e400}', "line 2: the number 1e400 is out of range"),
        ('{"type": "done", "provider": "p-one", "generation": NaN}', "line 2: NaN is not a number a journal may hold"),
        ('{"type": "done", "provider": "p-one", "generation": -Infinity}', "line 2: -Infinity is not a number"),
        (
            '{"type": "done", "provider": "p-one", "generation": 99999999999999999999}',
            "line 2: generation must be between 0 and 9223372036854775807, got 99999999999999999999",
        ),
        ('{"type": "failed", "provider": "p-one", "status": 1e400}', "line 2: the number 1e400 is out of range"),
        ("[" * 50_000, "line 2: nested too deeply"),
    ],
)
def test_journal_numbers_out_of_range_are_clear_errors(line, message):
    with pytest.raises(JournalError, match="^J: not a drain journal: " + message.replace("(", r"\(")):
        replay(journal_header() + line + "\n", source="J")


def test_a_journal_with_1e400_through_the_cli(home, tmp_path):
    journal = tmp_path / "j.jsonl"
    journal.write_text(
        journal_header().replace('"resourceVersion": "1"', '"resourceVersion": "1", "generation": 1e400')
    )
    before = journal.read_bytes()
    proc = xtask("env", "drain-restore", str(journal), env=home)
    assert_refused(proc, f"{journal}: not a drain journal: line 1: the number 1e400 is out of range")
    assert journal.read_bytes() == before


def test_a_legacy_journal_with_1e400(tmp_path):
    legacy = {"request": "drain", "operation": "o", "namespace": "n", "providers": {"p": {"generation": 1}}}
    text = json.dumps(legacy, indent=2).replace('"generation": 1', '"generation": 1e400')
    with pytest.raises(JournalError, match="^J: not a drain journal: the number 1e400 is out of range$"):
        replay(text, source="J")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_journal_dir_that_is_a_fifo_or_a_device_is_a_usage_error(home, tmp_path, kind):
    """click refuses a regular file where a folder is wanted, but not a FIFO or a device."""
    if kind == "fifo":
        target = tmp_path / "jd"
        os.mkfifo(target)
    else:
        target = Path("/dev/null")
    proc = xtask("env", "provider-drain", "--provider", "p-one", "--journal-dir", str(target), env=home)
    assert proc.returncode == 2, proc.stderr
    assert f"Invalid value for '--journal-dir': '{target}' is a" in proc.stderr and "not a folder" in proc.stderr
    assert "Traceback" not in proc.stderr
