"""A click command whose ``--help`` shows its flags in named groups (cloup), paying for cloup
only when help is shown.

cloup reads the installed click's version from the package metadata when it is imported (~40 ms
of ``importlib.metadata``): a command run, or a bad flag, never needs it. :func:`grouped_options`
adds each group's flags to the command as plain click options and records the group each belongs
to; :class:`GroupedCommand` renders ``--help`` through a cloup command built then from the same
parameters, so the help reads as cloup lays it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from xtask.cli.helptext import HelpMixin

# (title, what the group is for, option decorators), in the order --help lists them.
OptionGroup = tuple[str, str, Sequence[Callable[[Any], Any]]]

# The attribute naming a parameter's group: (title, purpose).
_GROUP = "xtask_help_group"


def grouped_options(groups: Sequence[OptionGroup]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add every group's options to the decorated command function, each tagged with its group."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for title, purpose, options in reversed(groups):
            params: list[click.Parameter] = getattr(f, "__click_params__", [])
            before = len(params)
            for option in reversed(options):
                f = option(f)
            for param in f.__click_params__[before:]:  # type: ignore[attr-defined]
                setattr(param, _GROUP, (title, purpose))
        return f

    return decorate


class GroupedCommand(HelpMixin, click.Command):
    """A command with examples (:class:`HelpMixin`) whose flags ``--help`` shows in the groups
    :func:`grouped_options` recorded; flags of no group go under ``default_group``."""

    default_group = "Other options"

    def get_help(self, ctx: click.Context) -> str:
        import cloup  # only to show help (see the module's docstring)

        groups: dict[tuple[str, str], Any] = {}
        for param in self.params:
            key = getattr(param, _GROUP, None)
            if key is not None:
                param.group = groups.setdefault(key, cloup.OptionGroup(key[0], help=key[1]))  # type: ignore[attr-defined]
        title = self.default_group

        class Help(HelpMixin, cloup.Command):
            def get_default_option_group(
                self, ctx: click.Context, is_the_only_visible_option_group: bool = False
            ) -> Any:
                group = super().get_default_option_group(ctx, is_the_only_visible_option_group)
                group.title = title
                return group

        shown = Help(
            name=self.name,
            params=self.params,
            help=self.help,
            epilog=self.epilog,
            short_help=self.short_help,
            examples=self.examples,
            context_settings=self.context_settings,
        )
        with cloup.Context(shown, parent=ctx.parent, info_name=ctx.info_name) as help_ctx:
            return shown.get_help(help_ctx)
