"""Kubernetes manifests as YAML, read with bounds: the one loader of ``forescale check`` and ``backtest --scaledobject``.

``load_all(text)`` returns the documents of a YAML stream as plain data, or raises ``YamlError`` (its message
names the line and what is accepted) before a single object is built from a stream that

* is larger than ``MAX_MANIFEST_BYTES`` (4 MiB; a ScaledObject is a few KiB),
* holds an anchor (``&x``), an alias (``*x``) or a merge key (``<<``): KEDA users do not write them, and an
  alias can make a few hundred bytes stand for gigabytes (the "billion laughs"),
* nests deeper than ``MAX_DEPTH`` or holds more than ``MAX_NODES`` values in all (memory and time stay
  bounded: ~50 MiB and a few seconds at the limit),
* repeats a key in one mapping (``qpsPerReplica`` twice): YAML keeps the last silently, the API server's strict
  decoding refuses it, and so does forescale.

As the API server reads YAML (through JSON), a timestamp stays the string it is, and keys become strings.
Events come from libyaml when PyYAML has it (it does in PyPI's wheels), else from PyYAML's own parser; the
composer, which sees anchors and aliases before anything is built, is PyYAML's with the checks above.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import MappingNode
from yaml.resolver import Resolver

MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # a ScaledObject file is a few KiB; refuse megabytes of YAML
MAX_DEPTH = 64  # a ScaledObject nests about 10 deep (managedFields about 15)
MAX_NODES = 100_000  # values in one stream: a ScaledObject has about 100, `kubectl get -o yaml` of 500 about 50k

try:  # libyaml's scanner and parser (C), PyYAML's composer (Python) on top
    from yaml._yaml import CParser as _Events
except ImportError:  # pragma: no cover - PyPI's wheels have libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Events(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class YamlError(ValueError):
    """A stream the manifest loader refuses; the message names the line and what is accepted."""


def _line(mark) -> str:
    return f"line {mark.line + 1}" if mark is not None else "the stream"


class _Loader(Composer, _Events, SafeConstructor, Resolver):
    def __init__(self, text: str):
        _Events.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.depth = self.nodes = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise YamlError(f"{_line(event.start_mark)}: YAML alias '*{event.anchor}': anchors and aliases are "
                            f"refused in manifests (KEDA's do not need them, and an alias can stand for gigabytes); "
                            f"write the value out")
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise YamlError(f"{_line(event.start_mark)}: YAML anchor '&{event.anchor}': anchors and aliases are "
                            f"refused in manifests; write the value out where it is used")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise YamlError(f"{_line(event.start_mark)}: more than {MAX_NODES:,} YAML values; a ScaledObject "
                            f"has about 100 (split the file)")
        if isinstance(event, CollectionStartEvent):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise YamlError(f"{_line(event.start_mark)}: nested deeper than {MAX_DEPTH} levels; a ScaledObject "
                                f"is about 10 deep")
        try:
            return super().compose_node(parent, index)
        finally:
            if isinstance(event, CollectionStartEvent):
                self.depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        out: dict[str, Any] = {}
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise YamlError(f"{_line(key_node.start_mark)}: YAML merge key '<<': refused with anchors and "
                                f"aliases; write the keys out")
            key = _key(self.construct_object(key_node, deep=True), key_node)
            if key in first:
                raise YamlError(f"{_line(key_node.start_mark)}: key {_short(key)!r} appears twice in one mapping "
                                f"(first at line {first[key]}); YAML would keep the last one silently: keep one")
            first[key] = key_node.start_mark.line + 1
            out[key] = self.construct_object(value_node, deep=deep)
        return out

    def construct_yaml_map(self, node):
        yield self.construct_mapping(node, deep=True)


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
# the API server reads YAML through JSON: a timestamp is the string written (KEDA's cron start is a string)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_scalar)


def _key(k: Any, node) -> str:
    """A mapping key as JSON (and so the API server) has it: a string."""
    if isinstance(k, bool):
        return "true" if k else "false"
    if k is None:
        return "null"
    if isinstance(k, (list, dict, set, bytes)):
        raise YamlError(f"{_line(node.start_mark)}: a mapping key that is a {type(k).__name__}; accepted: a string")
    return k if isinstance(k, str) else str(k)


def _short(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[:n] + "..."


def load_all(text: str) -> list[Any]:
    """Every document of the YAML stream ``text``, in order (an empty document is None); raises ``YamlError``."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise YamlError(f"larger than {MAX_MANIFEST_BYTES // 1024 // 1024} MiB; a ScaledObject manifest is a few KiB")
    loader = _Loader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise YamlError(f"{_line(mark)}: not valid YAML ({getattr(e, 'problem', None) or 'parse error'})") from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps the composer far from it
        raise YamlError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
