"""Shell completion of the values of flags (click's ``shell_complete=``).

* ``--env``: the env files there are (``envs/``, or the package's copy: :mod:`xtask.resources`);
* ``--context``: the contexts of the kubeconfig, read offline as kubectl reads it (``--kubeconfig``
  when given before it, else ``$KUBECONFIG``, else ``~/.kube/config``);
* ``--provider``, ``--gateway``: the InferenceProviders' names and ``spec.providerGateway`` values,
  listed from the cluster of ``--context`` in ``--namespace`` (else the context's), with a
  :data:`TIMEOUT` for connecting and one for the answer.

A completer never raises and never prints: anything that goes wrong (no kubeconfig, a cluster
that does not answer in time, a Forbidden) completes nothing, as kubectl's completion does. Shells
call them through ``_XTASK_COMPLETE`` (:mod:`xtask.__main__`); README.md says how to enable it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click
from click.shell_completion import CompletionItem

TIMEOUT = 2.0  # seconds to connect, and again for the answer: a shell waits for completion

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _never_raises(source: Callable[[click.Context], Iterable[str | None]]) -> Completer:
    """A completer offering the values of ``source`` that start with what was typed, sorted;
    nothing when ``source`` fails in any way."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        try:
            values = sorted({v for v in source(ctx) if isinstance(v, str) and v.startswith(incomplete)})
        except Exception:  # completion must not fail the shell's prompt: nothing to offer
            return []
        return [CompletionItem(v) for v in values]

    complete.__doc__ = source.__doc__
    return complete


def _given(ctx: click.Context, name: str) -> str | None:
    """The value of flag ``name`` given before the one being completed, if any."""
    value = ctx.params.get(name)
    return value if isinstance(value, str) and value else None


def env_names(ctx: click.Context) -> list[str]:
    """The env definitions ``--env`` accepts."""
    from xtask.envdef import ENVS_DIR, available_envs

    return available_envs(ENVS_DIR)


def context_names(ctx: click.Context) -> list[str]:
    """The contexts of the kubeconfig the command would read (no request is made)."""
    from agn import kubeconfig

    loaded = kubeconfig.load(_given(ctx, "kubeconfig"))
    return [c["name"] for c in loaded.config.get("contexts") or () if isinstance(c, dict)]


def _providers(ctx: click.Context) -> list[dict]:
    """The InferenceProviders of ``--namespace`` (else the context's) in ``--context``'s cluster."""
    from agn.kube import PROVIDERS, Kube

    kube = Kube.from_kubeconfig(
        kubeconfig=_given(ctx, "kubeconfig"),
        context=_given(ctx, "context"),
        field_manager="agn-xtask-completion",
        pool_size=1,
        request_timeout=(TIMEOUT, TIMEOUT),
    )
    try:
        return kube.list(PROVIDERS, _given(ctx, "namespace") or kube.namespace)[0]
    finally:
        kube.close()


def provider_names(ctx: click.Context) -> list[str | None]:
    """The InferenceProviders' names."""
    return [(p.get("metadata") or {}).get("name") for p in _providers(ctx)]


def gateway_names(ctx: click.Context) -> list[str | None]:
    """The providerGateway values of the InferenceProviders."""
    return [(p.get("spec") or {}).get("providerGateway") for p in _providers(ctx)]


complete_env = _never_raises(env_names)
complete_context = _never_raises(context_names)
complete_provider = _never_raises(provider_names)
complete_gateway = _never_raises(gateway_names)
