"""Showing any value in an error message: short, never failing, huge ints abbreviated.

Every package here names the offending value in its messages through :func:`show`;
:func:`fmt_int` is the one spelling of an int (``~1.2346e5000`` past 40 digits).
CuTe's notation for int tuples, :func:`layout._inttuple.fmt`, is built on it.
"""

from __future__ import annotations

import math
import reprlib

__all__ = ["fmt_int", "show", "show_error"]

_BIG = 10**40  # ints at least this large are abbreviated in messages and str()
_MOST_MESSAGE = 1000  # characters of a foreign exception's message quoted in ours


def fmt_int(x: int) -> str:
    """``str(x)``, or an abbreviation such as ``~1.2346e5000`` for a huge int.

    Python refuses ``str()`` of ints over 4,300 digits, and a message should stay
    short; the abbreviation is computed from the top bits, without ``str(x)``.

    >>> fmt_int(12), fmt_int(-10**50)
    ('12', '-~1.0000e50')
    """
    if -_BIG < x < _BIG:
        return str(x)
    n = abs(x)
    shift = max(n.bit_length() - 64, 0)
    log10 = math.log10(n >> shift) + shift * math.log10(2)
    exp = math.floor(log10)
    return f"{'-' if x < 0 else ''}~{10 ** (log10 - exp):.4f}e{exp}"


class _Repr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return fmt_int(x)


_repr = _Repr()
_repr.maxlevel = 4
_repr.maxstring = _repr.maxother = 60


def show(value: object) -> str:
    """A short, never-failing ``repr`` of ``value`` for an error message.

    >>> show((1, [2, 3])), show(10**5000)
    ('(1, [2, 3])', '~1.0000e5000')
    """
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__: name the type instead
        return f"<{type(value).__name__} object>"


def show_error(error: BaseException) -> str:
    """``Type: message`` of an exception raised by someone else's code (a plan, a program),
    for a message of ours: never failing (an exception whose ``__str__`` raises or returns
    no ``str`` is named by its type and a note), and at most about 1,000 characters.

    >>> show_error(ZeroDivisionError("division by zero"))
    'ZeroDivisionError: division by zero'
    >>> class Odd(Exception):
    ...     def __str__(self):
    ...         raise RuntimeError("no message")
    >>> show_error(Odd())
    'Odd: <its message could not be read: its __str__ raised RuntimeError>'
    """
    try:
        kind = type(error).__name__
        kind = kind if isinstance(kind, str) else "an exception"
    except Exception:  # a hostile metaclass
        kind = "an exception"
    try:
        text = str(error)
        if not isinstance(text, str):
            raise TypeError("__str__ returned no str")
    except Exception as e:
        text = f"<its message could not be read: its __str__ raised {type(e).__name__}>"
    if len(text) > _MOST_MESSAGE:
        text = f"{text[:_MOST_MESSAGE]}... ({len(text):,} characters)"
    return f"{kind}: {text}" if text else kind
