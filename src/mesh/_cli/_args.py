"""The ``meshlayout`` command's argument types: argparse ``type=`` callables that turn one
flag's text into a value or raise :class:`argparse.ArgumentTypeError` naming it."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["MOST_LISTED", "Merged", "bytes_per_dim", "digits", "dim_list", "indices", "mib",
           "number", "positive", "rank"]

_MOST_DIGITS = 30  # the longest number a flag may write: refused before Python parses it
_MOST_MIB = float(1 << 30)  # 1 PiB per buffer: far past any machine, far from overflow
_MOST_NUMBER = 1e12  # Gb/s or µs: far past any link
_MOST_BYTES = 1 << 60  # bytes per step: an exabyte
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_DIGITS = re.compile(f"[0-9]{{1,{_MOST_DIGITS}}}")
MOST_LISTED = 1 << 16
"""The most ranks (or hosts) one list flag (``--fail``, ``--spares``) names."""
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d*)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*")


def positive(text: str) -> int:
    """A positive int."""
    try:
        value = int(text) if len(text) <= _MOST_DIGITS else 0
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return value


def rank(text: str) -> int:
    """A rank, an int >= 0."""
    try:
        value = int(text) if len(text) <= _MOST_DIGITS else -1
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a rank (an int >= 0), got {text!r}")
    return value


def _float(text: str) -> float:
    try:
        return float(text) if len(text) <= _MOST_DIGITS else math.nan
    except ValueError:
        return math.nan


def mib(least: float) -> Callable[[str], float]:
    """A number of MiB in ``[least, 2**30]``."""
    def parse(text: str) -> float:
        value = _float(text)
        if not least <= value <= _MOST_MIB:  # also refuses NaN and inf
            raise argparse.ArgumentTypeError(
                f"must be a number of MiB in [{least:g}, {_MOST_MIB:g}], got {text!r}")
        return value
    return parse


def number(what: str, *, zero: bool) -> Callable[[str], float]:
    """A finite number of ``what`` (Gb/s, µs): > 0, or >= 0 when ``zero``."""
    def parse(text: str) -> float:
        value = _float(text)
        if not (0 <= value <= _MOST_NUMBER and (zero or value > 0)):
            bound = ">= 0" if zero else "> 0"
            raise argparse.ArgumentTypeError(f"must be a number of {what} {bound}, got {text!r}")
        return value
    return parse


def bytes_per_dim(text: str) -> dict[str, int]:
    """``dp=1GiB,tp=512MiB``: dim name -> bytes (an int; units B, KB, MB, GB, TB (powers of
    1000) and KiB, MiB, GiB, TiB (powers of 1024); no unit: bytes).

    >>> bytes_per_dim("dp=1GiB, tp=1.5e6")
    {'dp': 1073741824, 'tp': 1500000}
    """
    out: dict[str, int] = {}
    for item in text.split(","):
        name, eq, amount = item.partition("=")
        found = _AMOUNT.fullmatch(amount) if len(amount) <= _MOST_DIGITS else None
        value = None
        if found and found[2] in _UNITS and float(found[1]) * _UNITS[found[2]] <= _MOST_BYTES:
            value = round(float(found[1]) * _UNITS[found[2]])
        if not eq or not name.strip() or name.strip() in out or value is None or \
                value < 0:
            raise argparse.ArgumentTypeError(
                f"takes DIM=BYTES items separated by commas, each dim once, BYTES a number "
                f"with an optional unit ({', '.join(u for u in _UNITS if u)}), e.g. "
                f"dp=1GiB,tp=256MiB; got {item.strip()!r} in {text!r}")
        out[name.strip()] = value
    return out


def digits(text: str) -> int | None:
    """An int >= 0 written in at most 30 ASCII digits (spaces around it aside), else None.

    >>> digits(" 12 "), digits("²"), digits("-1")
    (12, None, None)
    """
    t = text.strip()
    return int(t) if _DIGITS.fullmatch(t) else None


def indices(noun: str) -> Callable[[str], tuple[int, ...]]:
    """``13,20-23``: ints >= 0 (``noun``s: ranks, hosts) separated by commas, each one int
    or an inclusive range ``A-B`` (``A <= B``), in the order given; at most
    :data:`MOST_LISTED` in all.

    >>> indices("rank")("13, 20-23")
    (13, 20, 21, 22, 23)
    """
    def parse(text: str) -> tuple[int, ...]:
        out: list[int] = []
        for item in text.split(","):
            first, dash, last = item.partition("-")
            a, b = digits(first), digits(last if dash else first)
            if a is None or b is None or b < a or len(out) + b - a >= MOST_LISTED:
                raise argparse.ArgumentTypeError(
                    f"takes {noun}s separated by commas, each an int >= 0 or a range A-B "
                    f"with A <= B, at most {MOST_LISTED:,} {noun}s in all (e.g. 13 or "
                    f"8-15,24); got {item.strip()!r} in {text!r}")
            out.extend(range(a, b + 1))
        return tuple(out)
    return parse


def dim_list(text: str) -> str:
    """``tp,ep``: dim names separated by commas, each once (the text, stripped).

    >>> dim_list("tp, ep")
    'tp,ep'
    """
    items = [item.strip() for item in text.split(",")]
    if not all(items) or len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"takes dim names separated by commas, each once, "
                                         f"e.g. tp,ep; got {text!r}")
    return ",".join(items)


class Merged(argparse.Action):
    """A flag that may be given again: its dicts are merged, a key given twice is refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        merged = dict(getattr(namespace, self.dest) or {})
        twice = sorted(set(merged) & set(values))
        if twice:
            parser.error(f"argument {option_string}: names {', '.join(twice)} more than once "
                         "(across its repetitions)")
        merged.update(values)
        setattr(namespace, self.dest, merged)
