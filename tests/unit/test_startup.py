"""Start-up cost: commands that do not talk to a cluster never import the Kubernetes client."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import contextlib, io, sys
from xtask.__main__ import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))
print(code, ",".join(loaded))
"""


@pytest.mark.parametrize(
    "argv,code",
    [
        (["--help"], 0),
        (["--version"], 0),
        (["env", "--help"], 0),
        (["env", "provider-drain", "--help"], 0),
        (["env", "render"], 0),
        (["env", "provider-drain", "--context", "x"], 2),  # usage error: neither --provider nor --gateway
        (["env", "provider-drain", "--provider", "a", "--gateway", "b"], 2),
        (["env", "provider-drain", "--provider", "a", "--qps", "nan"], 2),
        # A kubeconfig that cannot be used is reported before the client is imported.
        (["env", "provider-drain", "--provider", "a", "--dry-run", "--kubeconfig", "/nonexistent/kubeconfig"], 1),
    ],
)
def test_no_kubernetes_import(argv, code):
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got_code, loaded = out.stdout.strip().split(" ", 1) if " " in out.stdout.strip() else (out.stdout.strip(), "")
    assert int(got_code) == code
    assert loaded == "", f"imported {loaded}"


def test_the_probe_can_see_an_import(tmp_path):
    # The probe itself must be able to fail: a command that connects imports the client.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: c, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: c}}]\n"
        "current-context: c\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "env",
            "provider-drain",
            "--provider",
            "a",
            "--dry-run",
            "--kubeconfig",
            str(kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "kubernetes.client" in out.stdout


@pytest.mark.parametrize("verbose", [False, True])
def test_library_warnings_are_printed_only_with_verbose(verbose):
    """urllib3's warnings come from background watch threads; printed at interpreter shutdown they
    abort the process, so without -v they are not printed at all."""
    argv = ["--version", "-v"] if verbose else ["--version"]
    code = (
        "import logging\n"
        "from xtask.__main__ import main\n"
        f"main({argv!r})\n"
        "logging.getLogger('urllib3.connectionpool').warning('Retrying after connection broken')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("Retrying after connection broken" in out.stderr) is verbose


def test_finish_exits_with_the_code_and_flushed_output_while_daemon_threads_run():
    """The waiters' watch threads are daemons that may still be blocked, or writing, when the run
    ends; finish() must exit with the run's code and lose none of the buffered output."""
    code = (
        "import sys, threading, time\n"
        "from xtask.__main__ import finish\n"
        "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
        "def chatter():\n"
        "    while True:\n"
        "        sys.stderr.write('.')\n"
        "threading.Thread(target=chatter, daemon=True).start()\n"
        "sys.stdout.write('report line that is still buffered')\n"
        "finish(7)\n"
    )
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 7, out.stderr[-2000:]
        assert out.stdout == "report line that is still buffered"


def test_finish_exits_normally_without_other_threads():
    code = "import atexit\nfrom xtask.__main__ import finish\natexit.register(print, 'atexit ran')\nfinish(4)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 4
    assert out.stdout == "atexit ran\n"


# What every `env provider-drain` pays before click has parsed its flags (--help, a usage error, a
# run): the entry point and the command's module. A module that joins must be added here, on
# purpose; the run's own modules (tests/integration/test_single_drain_imports.py) load after.
PARSE_MODULES = frozenset(
    """
    agn agn.credentials agn.holds agn.inputfile agn.kubeerrors agn.kuberequest agn.model agn.names
    xtask xtask.__main__ xtask.cli xtask.cli.complete xtask.cli.env xtask.cli.env.gate_options
    xtask.cli.env.drain_options xtask.cli.env.option_groups xtask.cli.env.options xtask.cli.env.provider_drain
    xtask.cli.env.session_options xtask.cli.formats xtask.cli.helptext xtask.cli.output xtask.drain
    xtask.drain.core xtask.drain.core.defaults xtask.drain.core.holds xtask.drain.gates
    xtask.drain.gates.base xtask.drain.gates.flags xtask.errors xtask.params xtask.record
    """.split()
)

MODULES_PROBE = """
import contextlib, io, sys
from xtask.__main__ import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(code, " ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("xtask", "agn", "cloup", "yaml", "rich"))))
"""


def loaded_modules(*argv: str) -> tuple[int, set[str]]:
    out = subprocess.run([sys.executable, "-c", MODULES_PROBE, *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    code, _, names = out.stdout.strip().partition(" ")
    return int(code), set(names.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["env", "provider-drain", "--provider", "a", "--qps", "nan"],
        ["env", "provider-drain", "--provider", "a", "--concurrency", "many"],
        ["env", "provider-drain", "--provider", "a", "--bogus"],
    ],
)
def test_provider_drain_parses_its_flags_with_only_the_named_modules(argv):
    code, names = loaded_modules(*argv)
    assert code == 2
    assert sorted(names - PARSE_MODULES) == [], "new modules before provider-drain's flags are parsed"
    assert "xtask.cli.env.provider_drain" in names  # the probe sees the command's own module


def test_provider_drain_help_adds_only_cloup_to_lay_out_its_groups():
    code, names = loaded_modules("env", "provider-drain", "--help")
    assert code == 0
    extra = names - PARSE_MODULES
    assert "cloup" in extra
    assert sorted(n for n in extra if not n.startswith("cloup.")) == ["cloup"]
