"""The version of the distribution ``meshlayout`` (the three packages ``layout``, ``mesh`` and
``backend`` ship in it), read from its installed metadata: pyproject.toml's, the one source."""

from __future__ import annotations

import importlib.metadata

__all__ = ["distribution_version"]


def distribution_version() -> str:
    """The installed distribution's version, or ``"unknown"`` when the packages run from a
    source tree that was never installed."""
    try:
        return importlib.metadata.version("meshlayout")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
