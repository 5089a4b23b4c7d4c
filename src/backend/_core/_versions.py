"""The torch releases this package is tested on, and the warning for any other.

``pyproject.toml``'s ``torch`` extra states the same range (a test holds them equal); CI runs
the whole suite on the oldest and the torch-facing tests on the newest.  Read from the
installed distribution's metadata, so checking costs no torch import.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import warnings

from ._errors import UnsupportedTorchError

__all__ = ["TESTED_TORCH", "UNTESTED_TORCH_ENV", "require_tested_torch", "untested_torch",
           "warn_if_untested_torch"]

TESTED_TORCH = ((2, 13), (2, 16))
"""Tested torch releases: from 2.13 (inclusive) up to 2.16 (exclusive): 2.13.0, 2.14.1 and
2.15.0 in CI."""

UNTESTED_TORCH_ENV = "MESHLAYOUT_UNTESTED_TORCH"
"""Set to ``1``, a torch outside :data:`TESTED_TORCH` is used with a warning, not refused."""


def untested_torch(version: str) -> str | None:
    """The warning for torch ``version`` (``"2.14.1+cu128"``) if it is outside
    :data:`TESTED_TORCH`, else None.

    >>> untested_torch("2.14.1+cu128") is None
    True
    >>> untested_torch("2.15.0") is None
    True
    >>> print(untested_torch("2.16.0"))
    meshlayout is tested on torch >=2.13,<2.16; this is torch 2.16.0: ...
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    (lo, hi) = TESTED_TORCH
    if found is not None and lo <= (int(found[1]), int(found[2])) < hi:
        return None
    return (f"meshlayout is tested on torch >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}; this is torch "
            f"{version}: the facade reads some of torch's private names, which another "
            "release may lack or change")


@functools.cache
def _installed() -> str | None:
    """The installed torch's version, None without one or for a source tree (no metadata);
    read once per process (every mesh over torch groups asks)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def warn_if_untested_torch() -> None:
    """Warn (a ``UserWarning``, once: the package is imported once) when the installed torch
    is outside :data:`TESTED_TORCH`."""
    version = _installed()
    message = None if version is None else untested_torch(version)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=3)


def require_tested_torch() -> None:
    """Refuse a torch outside :data:`TESTED_TORCH` before the facade reads its private names:
    :class:`~backend.UnsupportedTorchError`, one line naming the installed release, the
    range and what to do (unless :data:`UNTESTED_TORCH_ENV` is ``1``).  Costs a metadata
    read, no torch import."""
    version = _installed()
    message = None if version is None else untested_torch(version)
    if message is None or os.environ.get(UNTESTED_TORCH_ENV) == "1":
        return
    (lo, hi) = TESTED_TORCH
    raise UnsupportedTorchError(
        f"torch {version} is not supported by this meshlayout (it supports torch "
        f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}): install a supported torch (pip install "
        f"'torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}'), or set {UNTESTED_TORCH_ENV}=1 to try "
        f"this one", str(version))
