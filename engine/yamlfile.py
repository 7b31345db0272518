"""YAML that people write (profiles, bench scenarios, triage rules, thresholds), read so that every
problem points at its line: `file:line: key: message`.

    data = load(text, "broken.yaml")          # raises YamlInvalid: one Problem, syntax only
    line_of(data["engine"], "max_num_seq")    # -> 5
    Problem("broken.yaml", 5, "engine.max_num_seq", "unknown key")

Mappings come back as `YamlMap` and sequences as `YamlList`: a plain dict / list that also knows
its own line and the line of each key or item. Each caller keeps its own validation rules and
reports with `Problem`, so the four kinds of file read alike.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any, Iterator

import yaml

from engine.data import SAFE_LOADER
from engine.errors import BadInput

# An "alias bomb" (`b: &b [*a, *a, ...]` nested a few levels) is a few hundred bytes that expand
# to billions of values; anything that walks or prints it then eats memory. No file of ours comes
# near this many values, even with its aliases written out.
MAX_VALUES = 100_000
# Values are quoted back to the user in messages; a pasted blob must not flood the terminal.
QUOTE_LIMIT = 80
SYNTAX_FIX = "fix the YAML syntax (indentation, colons, quotes) at that line"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file. `file` may instead name the flag that gave the value
    (`--set engine.max_num_seqs=lots`), and then `line` is None."""

    file: str
    line: int | None
    key: str
    message: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def __str__(self) -> str:
        return f"{self.where}: {self.key}: {self.message}" if self.key else f"{self.where}: {self.message}"


class YamlInvalid(BadInput):
    """The text is not YAML we can use at all; `problem` says where. Nothing was validated, so
    this is the only problem to show: "is required" for every key would only bury it."""

    def __init__(self, problem: Problem, fix: str = SYNTAX_FIX) -> None:
        super().__init__(str(problem), fix)
        self.problem = problem


class YamlMap(dict):
    """A mapping that knows its line, each key's line, and the keys it held twice.

    A repeated key keeps its first value; `duplicates` lists (key, line, first line)."""

    line: int
    lines: dict[Any, int]
    duplicates: list[tuple[Any, int, int]]


class YamlList(list):
    """A sequence that knows its line and each item's line."""

    line: int
    lines: list[int]


_WHOLE = object()


def line_of(container: Any, key: Any = _WHOLE) -> int | None:
    """The line of `key` (a mapping key or a list index) in `container`, else of the container
    itself; None for a value that did not come from `load` (a --set override, a default)."""
    lines = getattr(container, "lines", None)
    if key is not _WHOLE and lines is not None:
        try:
            return lines[key]
        except (KeyError, IndexError, TypeError):
            pass
    return getattr(container, "line", None)


class _Short(reprlib.Repr):
    # reprlib picks its method by type name, and would fall back to the full repr for ours.
    repr_YamlMap = reprlib.Repr.repr_dict
    repr_YamlList = reprlib.Repr.repr_list


_SHORT = _Short()
_SHORT.maxlevel = 3
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 10
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = QUOTE_LIMIT


def quote(value: Any) -> str:
    """repr() for a message, never longer than QUOTE_LIMIT characters whatever the value holds."""
    text = _SHORT.repr(value)
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 3] + "..."


class _LineLoader(SAFE_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, building YamlMap / YamlList."""


def _mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[YamlMap]:
    data = YamlMap()
    data.line, data.lines, data.duplicates = node.start_mark.line + 1, {}, []
    yield data
    # Keys brought in by a merge (`<<: *base`) may be overridden; a key written twice may not.
    own = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
    loader.flatten_mapping(node)
    written: set[Any] = set()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
            ) from None
        line = key_node.start_mark.line + 1
        if id(key_node) in own:
            if key in written:
                data.duplicates.append((key, line, data.lines[key]))
                continue
            written.add(key)
        data[key] = loader.construct_object(value_node)
        data.lines[key] = line


def _sequence(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[YamlList]:
    data = YamlList()
    data.line, data.lines = node.start_mark.line + 1, [n.start_mark.line + 1 for n in node.value]
    yield data
    data.extend(loader.construct_sequence(node))


def _timestamp(loader: _LineLoader, node: yaml.ScalarNode) -> Any:
    # `2024-13-01` matches the timestamp pattern, then datetime raises a bare ValueError.
    try:
        return yaml.constructor.SafeConstructor.construct_yaml_timestamp(loader, node)
    except ValueError as exc:
        raise yaml.constructor.ConstructorError(
            None, None, f"bad date {node.value!r}: {exc}", node.start_mark
        ) from None


_LineLoader.add_constructor("tag:yaml.org,2002:map", _mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _sequence)
_LineLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)


def load(text: str, file: str) -> Any:
    """The document in `text` (None when empty), mappings and lists carrying their lines.

    Raises YamlInvalid with one Problem for a syntax error, several documents, an alias bomb or
    nesting too deep to walk."""
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, file)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlInvalid(_syntax_problem(exc, file)) from None
    except RecursionError:
        raise YamlInvalid(Problem(file, None, "", "nested too deeply to read"), "flatten the file") from None
    finally:
        loader.dispose()


def _syntax_problem(exc: yaml.YAMLError, file: str) -> Problem:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if context and "single document" in context:
        reason = "holds more than one document (a second `---`)"
    return Problem(file, mark.line + 1 if mark is not None else 1, "", f"not valid YAML: {reason}")


def _check_expansion(root: yaml.Node, file: str) -> None:
    """Refuse a document that would hold more than MAX_VALUES values once its aliases are
    expanded, or an alias inside its own anchor. Counts each node once: cheap even for a bomb."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    aliased = False

    def size(node: yaml.Node) -> int:
        nonlocal aliased
        key = id(node)
        if key in sizes:
            aliased = True
            return sizes[key]
        if key in open_nodes:
            raise YamlInvalid(
                Problem(file, node.start_mark.line + 1, "", "an alias refers to the value that contains it"),
                "write the value out instead of the alias",
            )
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_VALUES:
                what = "aliases expand to" if aliased else "holds"
                raise YamlInvalid(
                    Problem(file, node.start_mark.line + 1, "", f"{what} more than {MAX_VALUES:,} values"),
                    "write the values out instead of repeating anchors (`*name`)" if aliased else "split the file",
                )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def duplicate_keys(data: Any, file: str) -> list[Problem]:
    """A Problem for each key written twice in one mapping, anywhere in `data` from `load`."""
    found: list[Problem] = []
    seen: set[int] = set()

    def walk(value: Any, path: str) -> None:
        if id(value) in seen:
            return
        if isinstance(value, YamlMap):
            seen.add(id(value))
            for key, line, first in value.duplicates:
                found.append(
                    Problem(file, line, f"{path}.{key}" if path else str(key), f"duplicate key (first at line {first})")
                )
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, YamlList):
            seen.add(id(value))
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    walk(data, "")
    return found
