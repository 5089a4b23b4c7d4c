"""Junk for the fuzz laws: hostile values and arguments kept as Python source.

Shared by ``layout_fuzz.py`` and ``test_mesh_fuzz.py``: each draws arguments as
source strings (so a failure prints a call that can be pasted into a shell) and
evaluates them in its own namespace with a :class:`Junk` subclass.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from hypothesis import reject


def deep_tuple(n: int, leaf: object = 0) -> object:
    """``leaf`` wrapped in ``n`` 1-tuples, built iteratively."""
    for _ in range(n):
        leaf = (leaf,)
    return leaf


def deep_list(n: int, leaf: object = 0) -> object:
    """``leaf`` wrapped in ``n`` one-item lists, built iteratively."""
    for _ in range(n):
        leaf = [leaf]
    return leaf


def selfref_list() -> list[object]:
    """A list that contains itself."""
    x: list[object] = []
    x.append(x)
    return x


def gen() -> Iterator[int]:
    """A generator of two small ints (an iterable without an order the API accepts)."""
    yield 0
    yield 1


class IntSub(int):
    """An int subclass: an integer-like that must come back as a plain ``int``."""


class Color(enum.IntEnum):
    RED = 2


class BadIndex:
    def __index__(self) -> int:
        raise TypeError("no index")


class NonIntIndex:
    def __index__(self) -> int:
        return "3"  # type: ignore[return-value]


class RaisingIndex:
    def __index__(self) -> int:
        raise ZeroDivisionError("index failed")


class HostileRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


class HostileIter:
    def __iter__(self) -> Iterator[int]:
        raise RuntimeError("no iter")

    def __len__(self) -> int:
        return 2


class HostileLen:
    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __iter__(self) -> Iterator[int]:
        return iter((0, 1))


class HostileList(list):  # type: ignore[type-arg]
    """A list whose iteration, length and items raise: it passes ``isinstance(x, list)``."""

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("no iter")

    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __getitem__(self, i: Any) -> Any:
        raise RuntimeError("no item")


class HostileMapping(Mapping):  # type: ignore[type-arg]
    """A Mapping whose every access raises: it passes ``isinstance(x, Mapping)``."""

    def __getitem__(self, k: object) -> object:
        raise RuntimeError("no item")

    def __iter__(self) -> Iterator[object]:
        raise RuntimeError("no iter")

    def __len__(self) -> int:
        raise RuntimeError("no len")


HOSTILE: dict[str, object] = {
    "deep_tuple": deep_tuple, "deep_list": deep_list, "selfref_list": selfref_list, "gen": gen,
    "IntSub": IntSub, "Color": Color, "BadIndex": BadIndex, "NonIntIndex": NonIntIndex,
    "RaisingIndex": RaisingIndex, "HostileRepr": HostileRepr, "HostileIter": HostileIter,
    "HostileLen": HostileLen, "HostileList": HostileList, "HostileMapping": HostileMapping,
}
"""The names above, for a junk namespace."""


class Junk:
    """A drawn argument kept as source: its repr is the source, ``build()`` a fresh value.

    Subclasses set ``NS``, the namespace the source is evaluated in.
    """

    NS: ClassVar[dict[str, object]] = {}
    __slots__ = ("_code", "src")

    def __init__(self, src: str) -> None:
        self.src = src
        self._code = compile(src, "<junk>", "eval")

    def __repr__(self) -> str:
        return self.src

    def value(self) -> object:
        """A fresh value of the source."""
        return eval(self._code, self.NS)

    def build(self) -> object:
        """:meth:`value`, or a rejected draw where it cannot be built (an unhashable set
        member, a value the library refuses to build)."""
        try:
            return self.value()
        except Exception:
            reject()
