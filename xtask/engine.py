"""Placeholder until the engine module lands (lead's scratch)."""
from __future__ import annotations
import re
def detect_engine(*, environ, which, runner):
    want = environ.get("KIND_EXPERIMENTAL_PROVIDER")
    if want:
        return (want, []) if which(want) else (None, [f"`{want}` is not on PATH"])
    reasons = []
    for cli in ("docker", "podman"):
        if which(cli) is None:
            reasons.append(f"`{cli}` is not on PATH"); continue
        r = runner.run([cli, "info", "--format", "json"], check=False, timeout=30)
        if r.returncode == 0:
            return cli, []
        reasons.append(f"`{cli} info` fails")
    return None, reasons
def qualified(ref, cli):
    if cli != "podman": return ref
    first = ref.split("/", 1)[0]
    if "/" in ref and (("." in first or ":" in first) or first == "localhost"): return ref
    return "localhost/" + ref
