"""The chaos soak's second maintainer: ``bob``, a real identity of his own (a client certificate
signed by the env's CA, his own kubeconfig and journals), bound to the drain Role the runtimes
ship (``agn-provider-drain``), not to the release verb. His drains and undrains of one provider
(a quarter of his undrains with ``--release-all``, which he is not allowed) run through the real
CLI at the same time as the main maintainer's step.

The main maintainer is the env's admin (``agn-admin``, in ``system:masters``): every verb is
allowed to it, the release verb too, so it is a granted releaser; bob is not (checked at the
start with a SubjectAccessReview)."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
from pathlib import Path

from chaos_env import CONSUMERS, NETWORK, NS, PROVIDERS, REPO, Env

sys.path.insert(0, str(REPO / "tests"))

ADMIN = "agn-admin"  # the env kubeconfig's user: the main maintainer
BOB = "bob"
BOB_SHARE = 0.4  # of the steps run one of bob's operations beside the main one


class BobRun:
    def __init__(self, provider: str, undrain: bool, release_all: bool, proc: subprocess.Popen, journals: set[Path]):
        self.provider, self.undrain, self.release_all = provider, undrain, release_all
        self.proc, self.journals = proc, journals
        self.kind = ""

    def named(self, targeted: bool) -> BobRun:
        self.kind = "bob " + ("undrain" if self.undrain else "drain") + ("-release-all" if self.release_all else "")
        self.kind += "" if targeted else "-patch-only"
        return self


class Team:
    """Bob's identity and his runs."""

    def __init__(self, env: Env) -> None:
        self.admin_env = env
        self.env: Env | None = None
        self.running: BobRun | None = None

    def setup(self) -> None:
        """Bob's certificate, kubeconfig and RBAC; returns once the API server grants them."""
        from identities import grant, user_kubeconfig

        from agn.kube import Kube
        from kubetest import can_i
        from xtask.runtime.controlplane import ControlPlane

        home = self.admin_env.home
        cp = ControlPlane(self.admin_env.state)
        path = user_kubeconfig(cp, BOB, home / "identities", namespace=NS)
        kube = Kube.from_kubeconfig(kubeconfig=str(home / "kubeconfig"), context="local-example", field_manager="chaos")
        grant(kube, NS, drainers=[BOB], releasers=[])
        if can_i(kube, BOB, "release-holds", "inferenceproviders", NS, groups=()):
            raise SystemExit("bob must not be allowed the release verb")
        self.env = Env(home, kubeconfig=path, journals=home / "journal-bob")

    def start(self, seed: int, step: int) -> BobRun | None:
        """Bob's operation of this step, if the schedule has one (its own stream of draws)."""
        rng = random.Random(f"{seed}:{step}:bob")
        if self.env is None or rng.random() >= BOB_SHARE:
            return None
        provider = rng.choice(sorted(PROVIDERS))
        undrain = rng.random() < 0.5
        targeted = rng.random() < 0.5
        # Now and then he tries to release every hold, which his role does not allow: the API
        # server's policy refuses it while another's hold is there (exit 3), I7 would see it.
        release_all = undrain and rng.random() < 0.25
        args = ["env", "provider-drain", "--context", BOB, "--provider", provider, "--timeout", "60"]
        args += ["--holder", "bob"] + ([] if undrain else ["--reason", "chaos: the second maintainer"])
        if targeted:
            args += ["--network", NETWORK, *(a for c in CONSUMERS for a in ("--consumer", c))]
        if undrain:
            args += ["--undrain", "--release-all"] if release_all else ["--undrain"]
        journals = self.env.journal_files()
        self.running = BobRun(provider, undrain, release_all, self.env.spawn(*args), journals).named(targeted)
        return self.running

    def busy(self) -> str | None:
        """The provider bob's running operation touches."""
        return self.running.provider if self.running is not None else None

    def finish(self, timeout: float = 240) -> tuple[BobRun, int, str] | None:
        run, self.running = self.running, None
        if run is None:
            return None
        try:
            out, _ = run.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            out, _ = run.proc.communicate()
        return run, run.proc.returncode, out

    def restore(self, run: BobRun) -> list[tuple[str, int, str]]:
        """``env drain-restore`` as bob of every journal his run left."""
        assert self.env is not None
        out = []
        for journal in sorted(self.env.journal_files() - run.journals):
            code, said = self.env.run("env", "drain-restore", str(journal), timeout=120)
            out.append((journal.name, code, said))
        return out

    def stop(self) -> None:
        if self.running is not None:
            with contextlib.suppress(ProcessLookupError):
                self.running.proc.kill()
            self.running.proc.communicate()
            self.running = None


def refused_for_another_owner(out: str) -> bool:
    """Bob's undrain of a provider someone else holds: refused (exit 3), naming the owner."""
    return "not by you" in out and ADMIN in out
