"""Every JSON document specguard writes or reads: one typed model each (a TypedDict with its
schema name and version), checked against the model where it crosses the boundary, on load and
before save, so the code between reads typed keys it can trust.

A `Document` knows its schema, its version, the versions older files have (and how to read them
as the current one) and what a user does about a file that is not one. `check` walks a value
against a type annotation: TypedDicts (their required keys, and every key present), lists,
tuples, dicts, unions, Literals and the JSON scalars; `Any` is a value specguard does not read
(a free-form field, e.g. an engine's own server arguments), and is said so where it is declared.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, Union, cast, get_args, get_origin, get_type_hints, is_typeddict

from specguard import __version__
from specguard.store.atomic import atomic_write_json

T = TypeVar("T")


class DocumentError(ValueError):
    """A file that is not a document this specguard can read: the message names the file and what is wrong."""


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check(value: Any, tp: Any, where: str) -> None:
    """DocumentError naming `where` (a path into the document) when `value` is not a `tp`."""
    if tp is Any:
        return
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        _check_union(value, get_args(tp), where)
    elif origin is Literal:
        if value not in get_args(tp):
            raise DocumentError(f"{where} is {value!r}; expected one of {', '.join(map(repr, get_args(tp)))}")
    elif is_typeddict(tp):
        _check_typeddict(value, tp, where)
    elif origin in (list, tuple) or tp in (list, tuple):
        _check_sequence(value, tp, where)
    elif origin is dict or tp is dict:
        _check_mapping(value, tp, where)
    else:
        _check_scalar(value, tp, where)


def _check_union(value: Any, options: tuple[Any, ...], where: str) -> None:
    errors = {}
    for option in options:
        try:
            check(value, option, where)
            return
        except DocumentError as exc:
            errors[option] = str(exc)
    others = [o for o in options if o is not type(None)]
    if len(others) == 1 and value is not None:  # X | None and not None: what is wrong with it as an X
        raise DocumentError(errors[others[0]])
    raise DocumentError(f"{where} is {_short(value)}; expected {' or '.join(_name(o) for o in options)}")


def _check_typeddict(value: Any, tp: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise DocumentError(f"{where} is {_short(value)}; expected an object ({tp.__name__})")
    missing = [k for k in sorted(tp.__required_keys__) if k not in value]
    if missing:
        raise DocumentError(f"{where} lacks {', '.join(missing)}")
    hints = get_type_hints(tp)
    for key, item in value.items():
        if key in hints:  # keys a newer specguard added are kept and not read
            check(item, hints[key], f"{where}.{key}")


def _check_sequence(value: Any, tp: Any, where: str) -> None:
    if not isinstance(value, (list, tuple)):
        raise DocumentError(f"{where} is {_short(value)}; expected a list")
    args = get_args(tp)
    item_tp = args[0] if args and (get_origin(tp) is list or (len(args) == 2 and args[1] is Ellipsis)) else Any
    for i, item in enumerate(value):
        check(item, item_tp, f"{where}[{i}]")


def _check_mapping(value: Any, tp: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise DocumentError(f"{where} is {_short(value)}; expected an object")
    args = get_args(tp)
    for key, item in value.items():
        if not isinstance(key, str):
            raise DocumentError(f"{where} has a key {key!r} that is not a string")
        if args:
            check(item, args[1], f"{where}.{key}")


def _check_scalar(value: Any, tp: Any, where: str) -> None:
    if tp is type(None):
        ok = value is None
    elif tp is float:  # JSON does not tell 2 from 2.0; NaN and infinities are not JSON
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp in (str, bool):
        ok = isinstance(value, tp)
    else:
        raise TypeError(f"check: {where}: unsupported annotation {tp!r}")
    if not ok:
        raise DocumentError(f"{where} is {_short(value)}; expected {_name(tp)}")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Document(Generic[T]):
    """One JSON format: `schema` and `version` as every file of it says, its model, and for older
    files the versions still read (`readable`) and `upgrade(raw, version)`, which returns the
    document as the current version (in memory; the file is never rewritten)."""

    schema: str
    version: int
    model: type
    what: str  # "results file": what the messages call one
    make: str  # how a user makes one, for the message that a file is not one
    readable: tuple[int, ...] = ()
    upgrade: Callable[[dict[str, Any], int], dict[str, Any]] | None = None
    error: type[DocumentError] = DocumentError  # what a bad file raises (a format's own subclass)

    def validate(self, raw: Any, source: str) -> T:
        """The document, upgraded to the current version where it is older, checked against the model."""
        if not isinstance(raw, dict) or raw.get("schema") != self.schema:
            found = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
            raise self.error(f"{source} is not a specguard {self.what} (schema {found!r}, expected "
                             f"{self.schema!r}); {self.make}")
        version = raw.get("schema_version")
        if version != self.version:
            if version not in self.readable or self.upgrade is None:
                readable = ", ".join(map(str, sorted({*self.readable, self.version})))
                raise self.error(f"{source} has {self.what} schema_version {version!r}; this specguard ({__version__}) reads "
                                 f"version{'s' if ',' in readable else ''} {readable}: upgrade specguard to read it")
            raw = self.upgrade(raw, version)
        try:
            check(raw, self.model, source)
        except DocumentError as exc:
            raise self.error(f"{exc} (a damaged {self.what}?)") from None
        return cast(T, raw)

    def load(self, path: str | Path) -> T:
        """Read and validate a file; errors name the file and what is wrong."""
        p = Path(path)
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise self.error(f"{p}: no such file") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self.error(f"{p} is not JSON ({exc}); expected a {self.what}: {self.make}") from None
        return self.validate(raw, str(p))

    def save(self, doc: T, path: str | Path) -> None:
        """Check the document against its model, then write it all or nothing."""
        check(doc, self.model, f"{self.what} for {path}")
        atomic_write_json(Path(path), doc)
