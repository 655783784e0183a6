"""Command-line settings declared once, the rest derived.

A program's settings are one frozen dataclass; each field declared with :func:`setting` carries
its flag's help, argparse type (which is also its validation), metavar and group. From that one
declaration come:

- the defaults (the dataclass's own, so code that builds the settings gets the same ones);
- the parser (:func:`parse`): ``--field-name`` per field, in declaration order; a field without
  a default, or marked ``required``, is a required flag; a ``bool`` defaulting to False is a
  switch, one defaulting to True gets ``--no-...`` too. A ``ValueError`` from the dataclass's
  ``__post_init__`` (checks across fields) is a usage error, like a bad single value;
- the command line that starts the program with chosen values (:func:`argv_for`), each value
  checked by its flag's type before the program is ever started;
- the docs table (:func:`markdown_table`), rendered into ``docs/settings.md``.

Pure: no I/O beyond argparse's own printing and exit on a usage error. It knows no program;
the programs' ``settings`` modules use it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
FLAG = "agn.flag"  # the key of a field's Flag in its dataclass metadata


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one setting appears on the command line and in the docs."""

    help: str | None = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    group: str | None = None  # an argparse argument group (its title)
    # Required on the command line although code may leave the field at its default (the
    # operator's namespace: the controller is given its namespace separately).
    required: bool = False


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str | None = None,  # noqa: A002 - argparse's own name for it
    type: Callable[[str], Any] | None = None,  # noqa: A002 - argparse's own name for it
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    group: str | None = None,
    required: bool = False,
) -> Any:
    """A dataclass field that is also a flag. Without ``default`` the field (and the flag) is required."""
    metadata = {FLAG: Flag(help=help, type=type, metavar=metavar, choices=choices, group=group, required=required)}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _settings(cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    return [(f, f.metadata[FLAG]) for f in dataclasses.fields(cls) if FLAG in f.metadata]


def _required(field: dataclasses.Field, flag: Flag) -> bool:
    return flag.required or field.default is dataclasses.MISSING


def build_parser(cls: type, *, prog: str, description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field, flag in _settings(cls):
        target: argparse.ArgumentParser | argparse._ArgumentGroup = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_argument_group(flag.group)
            target = groups[flag.group]
        kwargs: dict[str, Any] = {"dest": field.name, "help": flag.help}
        if _required(field, flag):
            kwargs["required"] = True
        else:
            kwargs["default"] = field.default
        if isinstance(field.default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction if field.default else "store_true"
        else:
            kwargs.update(type=flag.type, metavar=flag.metavar, choices=flag.choices)
        target.add_argument(flag_name(field.name), **kwargs)
    return parser


def parse(cls: type[T], argv: list[str] | None, *, prog: str, description: str | None = None) -> T:
    """``cls`` made from ``argv`` (None: ``sys.argv``); a usage error exits 2 with argparse's message."""
    parser = build_parser(cls, prog=prog, description=description)
    values = vars(parser.parse_args(argv))
    try:
        return cls(**values)
    except ValueError as exc:  # a check across fields, from __post_init__
        parser.error(str(exc))


def argv_for(cls: type, **values: Any) -> list[str]:
    """The flags that start the program with ``values`` (field name -> value), in the order given.

    ``None`` leaves a flag out. An unknown name is a ``TypeError``, a value its flag's type
    refuses a ``ValueError`` naming the flag: both are caught here, not by a process that
    fails to start somewhere else.
    """
    declared = {field.name: (field, flag) for field, flag in _settings(cls)}
    out: list[str] = []
    for name, value in values.items():
        if name not in declared:
            raise TypeError(f"{cls.__name__} has no setting {name!r}")
        if value is None:
            continue
        field, flag = declared[name]
        if isinstance(field.default, bool):
            if value != field.default:
                out.append(flag_name(name) if value else "--no-" + name.replace("_", "-"))
            continue
        text = str(value)
        if flag.type is not None:
            try:
                flag.type(text)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise ValueError(f"{flag_name(name)} {text}: {exc}") from None
        if flag.choices is not None and text not in flag.choices:
            raise ValueError(f"{flag_name(name)} {text}: not one of {', '.join(flag.choices)}")
        out += [flag_name(name), text]
    return out


def _shown_default(field: dataclasses.Field, flag: Flag) -> str:
    if _required(field, flag):
        return "required"
    if field.default is None:
        return "unset"
    if isinstance(field.default, bool):
        return "on" if field.default else "off"
    return f"`{field.default}`"


def _shown_flag(field: dataclasses.Field, flag: Flag) -> str:
    name = flag_name(field.name)
    if isinstance(field.default, bool):
        return f"`--[no-]{name[2:]}`" if field.default else f"`{name}`"
    if flag.choices:
        return f"`{name} {{{','.join(flag.choices)}}}`"
    return f"`{name} {flag.metavar or field.name.upper()}`"


def markdown_table(cls: type) -> str:
    """Flag, default and help of every setting of ``cls`` as a markdown table; the settings of an
    argument group follow in a table of their own under the group's title."""
    sections: dict[str | None, list[str]] = {}
    for field, flag in _settings(cls):
        text = (flag.help or "").replace("%(default)s", str(field.default)).replace("%%", "%").replace("|", "\\|")
        row = f"| {_shown_flag(field, flag)} | {_shown_default(field, flag)} | {text} |"
        sections.setdefault(flag.group, []).append(row)
    out = []
    for group, rows in sections.items():
        title = f"{group[0].upper()}{group[1:]}:\n\n" if group else ""
        out.append(title + "\n".join(["| flag | default | what it does |", "| --- | --- | --- |", *rows]) + "\n")
    return "\n".join(out)
