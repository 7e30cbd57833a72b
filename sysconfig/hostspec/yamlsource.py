"""Read one YAML spec file into plain data plus a line map.

PyYAML's loaders silently keep the last of duplicate keys and forget where
values came from, so this walks the node tree from `yaml.compose()` instead:
duplicates become problems, and every key path maps to (file, line) so later
checks can point at the line that set a value.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.config_schema import format_path
from hostspec.errors import Problem, SpecError
from hostspec.yamlsyntax import syntax_problem

KeyPath = tuple  # ('engine', 'models', 0, 'name')
Origins = dict  # KeyPath -> (file, line)


class _Walker:
    def __init__(self, display: str):
        self.display = display
        self.constructor = yaml.SafeLoader("")  # only its scalar constructors are used
        self.origins: Origins = {}
        self.problems: list[Problem] = []

    def problem(self, node: yaml.Node, path: KeyPath, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(self.display, node.start_mark.line + 1, format_path(path), message, hint))

    def build(self, node: yaml.Node, path: KeyPath) -> object:
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.origins[path + (i,)] = (self.display, item.start_mark.line + 1)
                items.append(self.build(item, path + (i,)))
            return items
        return self.constructor.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict:
        out: dict = {}
        first_line: dict = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_node, path, "a key must be a plain scalar, not a list or mapping")
                continue
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.problem(key_node, path + ("<<",), "YAML merge keys are not supported",
                             "layer spec files with --spec instead")
                continue
            key = self.constructor.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                self.problem(key_node, path, f"unusable key {key!r}")
                continue
            if key in first_line:
                self.problem(key_node, path + (key,), f"duplicate key (first defined on line {first_line[key]})",
                             "YAML keeps only one of them; delete the other")
                continue
            first_line[key] = line
            self.origins[path + (key,)] = (self.display, line)
            out[key] = self.build(value_node, path + (key,))
        return out


def read_yaml(path: Path, display: str, *, first: bool = True) -> tuple[object, Origins]:
    """Parse `path` (shown as `display` in problems). Raises SpecError listing every problem.
    An empty (or comment-only) overlay is a layer that changes nothing; the
    first file must hold at least `version: 1`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(display, None, "", "spec file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([Problem(display, None, "", f"cannot read spec file: {exc}")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise SpecError([syntax_problem(display, exc)]) from None
    if root is None:
        if not first:
            return {}, {(): (display, 1)}
        raise SpecError([Problem(display, 1, "", "empty file", "a spec starts with 'version: 1'")])
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else f"the scalar {root.value!r}"
        raise SpecError([Problem(display, root.start_mark.line + 1, "",
                                 f"the top level must be a mapping of sections, got {kind}",
                                 "expected keys like version, host, service, engine, hosts, deploy")])
    walker = _Walker(display)
    try:
        data = walker.build(root, ())
    except yaml.YAMLError as exc:  # e.g. an unconstructible tagged scalar
        mark = getattr(exc, "problem_mark", None)
        raise SpecError([Problem(display, mark.line + 1 if mark else None, "", f"YAML error: {exc}")]) from None
    if walker.problems:
        raise SpecError(walker.problems)
    walker.origins[()] = (display, 1)
    return data, walker.origins
