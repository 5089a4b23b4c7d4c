"""NumPy, an optional dependency (meshlayout's ``numpy`` extra), looked up in one place.

Queries that list ranks use it when it is there and run the same arithmetic in Python
when it is not (:func:`numpy`); operations on array values need it (:func:`need_numpy`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ._errors import NumpyMissingError

__all__ = ["need_numpy", "numpy"]


def numpy() -> Any:
    """The NumPy module, or None when it is not installed (the pure-Python path)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


def need_numpy(what: str) -> Any:
    """The NumPy module, or :class:`~mesh.NumpyMissingError` saying that ``what`` needs it
    and naming the extra that installs it."""
    np = numpy()
    if np is None:
        raise NumpyMissingError(
            f"{what} needs NumPy, which is not installed: install meshlayout's numpy extra "
            "(from the checkout's root: pip install -e '.[numpy]'), or pip install numpy")
    return np
