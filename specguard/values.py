"""Values a user types on a command line, parsed in one place: every command and the pytest
options read comma-separated levels, counts and rates through these, so they accept the same
spellings and word a bad one the same way (one line naming the flag and an example)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ValueTextError(ValueError):
    """A command-line value that is not what its flag takes: the message names the flag."""


def _split(text: str, convert: Callable[[str], T]) -> list[T]:
    """Comma-separated values, blanks dropped (a trailing comma); [] when one does not convert."""
    try:
        return [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return []


def positive_ints(flag: str, text: str, example: str = "1,4,16", where: str = "") -> list[int]:
    """`1,4,16` -> [1, 4, 16]; anything else is an error. `where` follows the value in the
    message, e.g. " (command line)"."""
    values = _split(text, int)
    if not values or any(v <= 0 for v in values):
        raise ValueTextError(f"{flag} {text}{where}: use comma-separated positive integers, e.g. {example}")
    return values


def positive_floats(flag: str, text: str, example: str = "2,8,32") -> list[float]:
    """`2,8.5` -> [2.0, 8.5]; each value finite and above 0."""
    values = _split(text, float)
    if not values or not all(0 < v and math.isfinite(v) for v in values):
        raise ValueTextError(f"{flag} {text}: use comma-separated positive numbers, e.g. {example}")
    return values


def numbers(flag: str, text: str, example: str = "0.01,0.03") -> list[float]:
    """`0,0.03,inf` -> [0.0, 0.03, inf]: any numbers (the caller bounds them)."""
    values = _split(text, float)
    if not values:
        raise ValueTextError(f"{flag} {text}: use comma-separated numbers, e.g. {example}")
    return values


def names(text: str) -> list[str]:
    """`a,b,` -> ["a", "b"]: comma-separated names, blanks dropped."""
    return [x.strip() for x in text.split(",") if x.strip()]


def arg_type(parse: Callable[[str, str], list[int]] | Callable[[str, str], list[float]],
             flag: str) -> Callable[[str], list[int] | list[float]]:
    """An argparse `type=` for `flag`: argparse words the error as `argument FLAG: MESSAGE`."""
    def convert(text: str) -> list[int] | list[float]:
        try:
            return parse(flag, text)
        except ValueTextError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag} ")) from None  # argparse names it
    return convert
