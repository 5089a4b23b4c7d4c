"""The ``meshlayout`` command's argument types: argparse ``type=`` callables that turn one
flag's text into a value or raise :class:`argparse.ArgumentTypeError` naming it."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

__all__ = ["bytes_per_dim", "mib", "number", "positive", "rank"]

_MOST_DIGITS = 30  # an int flag longer than this is refused before Python parses it
_MOST_MIB = float(1 << 30)  # 1 PiB per buffer: far past any machine, far from overflow
_MOST_NUMBER = 1e12  # Gb/s or µs: far past any link
_MOST_BYTES = 1 << 60  # bytes per step: an exabyte
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
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
