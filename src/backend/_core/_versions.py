"""The torch releases this package is tested on, and the warning for any other.

``pyproject.toml``'s ``torch`` extra states the same range (a test holds them equal); CI runs
the whole suite on the oldest and the torch-facing tests on the newest.  Read from the
installed distribution's metadata, so checking costs no torch import.
"""

from __future__ import annotations

import importlib.metadata
import re
import warnings

__all__ = ["TESTED_TORCH", "untested_torch", "warn_if_untested_torch"]

TESTED_TORCH = ((2, 13), (2, 15))
"""Tested torch releases: from 2.13 (inclusive) up to 2.15 (exclusive)."""


def untested_torch(version: str) -> str | None:
    """The warning for torch ``version`` (``"2.14.1+cu128"``) if it is outside
    :data:`TESTED_TORCH`, else None.

    >>> untested_torch("2.14.1+cu128") is None
    True
    >>> print(untested_torch("2.16.0"))
    meshlayout is tested on torch >=2.13,<2.15; this is torch 2.16.0: ...
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    (lo, hi) = TESTED_TORCH
    if found is not None and lo <= (int(found[1]), int(found[2])) < hi:
        return None
    return (f"meshlayout is tested on torch >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}; this is torch "
            f"{version}: the facade reads some of torch's private names, which another "
            "release may lack or change")


def warn_if_untested_torch() -> None:
    """Warn (a ``UserWarning``, once: the package is imported once) when the installed torch
    is outside :data:`TESTED_TORCH`."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # torch from a source tree: no metadata
        return
    message = untested_torch(version)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=3)
