"""Parsing YAML that a person wrote (kubeconfigs, environment files) with one-line errors.

PyYAML's messages span several lines and quote the input back; users get one line that says
what is wrong and where. Callers prefix the file name. Pure: text in, data out.

These files are plain data, so the loader is stricter than YAML itself (kubeconfigs written by
kubectl, kind or cloud CLIs never use any of this):

* **Aliases** (``*name``) are refused: a few lines of nested aliases ("billion laughs") expand
  to billions of nodes when a value is validated or shown.
* **Nesting** deeper than :data:`MAX_DEPTH` levels is refused, instead of a ``RecursionError``.
* **Duplicate keys** in one mapping are refused, naming the key and both lines (PyYAML keeps
  the last value silently; YAML says keys are unique).
* **Integers** longer than :data:`MAX_INT_DIGITS` digits are refused where they are written
  (Python refuses to convert more than 4,300 digits, with an error that names no place).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

MAX_DEPTH = 100  # an env file or kubeconfig nests about 6 levels
MAX_INT_DIGITS = 30  # far beyond any rank, port or count (int64 has 19)
_MERGE = "tag:yaml.org,2002:merge"


class YamlProblem(ValueError):
    """The text is not UTF-8 or not YAML; ``str()`` is one line without the file name."""


class _Refused(yaml.YAMLError):
    """Valid YAML this loader does not accept (an alias, deep nesting); at ``mark``."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases, deep nesting or duplicate keys (see the module docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(f"aliases (*{event.anchor}) are not accepted in this file", event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the constructor below says so
                if first is not key_node:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(ch.isalnum() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _Refused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def parse_yaml(data: bytes | str) -> Any:
    """One YAML document (``None`` for an empty one). Raises :class:`YamlProblem`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlProblem(f"not UTF-8 text (byte {exc.start})") from None
    loader = _StrictLoader(data)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise YamlProblem(f"refused ({describe(exc)})") from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"not valid YAML ({describe(exc)})") from None
    except RecursionError:  # not expected past MAX_DEPTH, but never a traceback
        raise YamlProblem(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


def describe(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` (1-based), on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["unreadable"])[0]
    context = getattr(exc, "context", None)
    if context and not context.startswith("while "):  # "while parsing a block mapping" adds nothing
        problem = f"{context}, {problem}"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def show(value: Any, *, limit: int = 60) -> str:
    """A value for an error message: its repr, shortened, with the type when that helps."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, (dict, list)) or value is None:
        return f"{type(value).__name__} {text}" if value is not None else "nothing (null)"
    return text
