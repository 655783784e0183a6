"""``xtask env render``: print the Kubernetes objects an environment deploys, as YAML.

Read-only: renders from ``envs/<env>.yaml`` and ``manifests/`` and writes nothing, so its
output can be reviewed, diffed, or piped to ``kubectl apply --server-side -f -``. The objects
are the same for every runtime that deploys manifests (docs/runtimes.md), so there is no
``--runtime`` to choose.

``-o`` as kubectl's: ``yaml`` (the default) is one YAML document per object, ready for
``kubectl apply -f -``; ``json`` is the objects as one ``v1`` ``List`` (what ``kubectl get -o
json`` prints for several objects; its ``items`` are exactly the YAML documents); ``name`` is
one ``kind.group/name`` line per object.
"""

from __future__ import annotations

import click
import yaml

from agn.objects import kubectl_name, list_of
from xtask.cli.env.options import env_option, namespace_type
from xtask.cli.formats import JSON, NAME, YAML, emit_names, plain
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import emit_json
from xtask.crds import crd_documents, policy_documents
from xtask.envdef import load_env
from xtask.errors import ExitCode, exit_codes_epilog
from xtask.manifests import IMAGE, render

EXAMPLES = (
    Example("Print every object of the example env, CRDs first.", "--env example"),
    Example(
        "Only the env's own objects, for another namespace and a pushed image.",
        "--env example --no-crds --namespace agn-staging --image registry.example.com/agn:1.0",
    ),
)
EXIT_CODES = {ExitCode.OK: "done: every object printed", ExitCode.ERROR: None, ExitCode.USAGE: None}


@click.command(name="render", cls=HelpCommand, examples=EXAMPLES, epilog=exit_codes_epilog(EXIT_CODES))
@env_option
@click.option("--namespace", type=namespace_type, default=None, metavar="NS", help="Override the env's namespace.")
@click.option("--image", default=IMAGE, show_default=True, help="Image for the operator, gateways and fake providers.")
@click.option(
    "--crds/--no-crds",
    default=True,
    show_default=True,
    help="Include the AGN CRDs and the drain-hold admission policy first.",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice([YAML, JSON, NAME]),
    default=YAML,
    show_default=True,
    help="yaml: one document per object (for kubectl apply -f -); json: the objects as one v1 List; "
    "name: one kind.group/name line per object.",
)
def render_cmd(env_name: str, namespace: str | None, image: str, crds: bool, output: str) -> None:
    """Print every object `env up` applies on a runtime that deploys manifests (CRDs, the admission
    policy that keeps drain holds to their owners, namespace, RBAC, workloads, AGN objects)."""
    objects = (crd_documents() + policy_documents() if crds else []) + render(
        load_env(env_name), namespace=namespace, image=image
    )
    if output == JSON:
        emit_json(list_of(plain(objects)))
    elif output == NAME:
        emit_names(kubectl_name(obj) for obj in objects)
    else:
        click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
