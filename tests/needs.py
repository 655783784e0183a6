"""What a test needs of the machine that a newcomer may not have installed yet, said once:
missing, the test skips with the reason; missing where CI requires it (``AGN_REQUIRE_*=1``,
set by .ci/run after it installs the tool), it fails instead, so CI never skips it quietly."""

from __future__ import annotations

import os
import shutil

import pytest

PROMETHEUS_TOOLS = ("prometheus", "promtool")


def prometheus_missing() -> str | None:
    """Why the env's Prometheus cannot run here (None when both tools are installed)."""
    missing = [tool for tool in PROMETHEUS_TOOLS if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed (scripts/install-prometheus.sh)" if missing else None


def need_prometheus(*, module: bool = False) -> None:
    """Skip (or, with AGN_REQUIRE_PROMETHEUS=1, fail) unless prometheus and promtool are installed."""
    why = prometheus_missing()
    if why is None:
        return
    if os.environ.get("AGN_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"AGN_REQUIRE_PROMETHEUS=1 but {why}", pytrace=False)
    pytest.skip(why, allow_module_level=module)
