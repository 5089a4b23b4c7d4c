"""Names the last release moved, kept working for this one with a ``DeprecationWarning``
that names the replacement (and a CHANGELOG line).  Each goes in the next release.

- ``backend.NotInMeshError`` -> :class:`backend.NotAMemberError`;
- ``Backend.bind(view, ...)`` -> :func:`backend.bind(view, backend, ...) <backend.bind>`;
- ``FakeGroup.family`` -> :attr:`backend.FakeGroup.dim_view`;
- ``C10dBackend.explain(error, group)`` -> :meth:`backend.C10dBackend.diagnose` (on the
  class itself: it loads with torch).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from mesh import MeshView

from ._core import CachedBackend, FakeGroup, NotAMemberError, Override
from ._facade import DeviceMesh, bind

__all__ = ["MOVED", "moved"]

MOVED = {"NotInMeshError": ("backend.NotAMemberError", NotAMemberError)}
"""The package's moved names: old name -> (the replacement's name, the replacement)."""


def moved(old: str, new: str) -> None:
    """Warn that ``old`` moved to ``new`` (for the caller's caller)."""
    warnings.warn(f"{old} is deprecated and goes in the next release: use {new}",
                  DeprecationWarning, stacklevel=3)


def _bind(self: CachedBackend[Any], view: MeshView, *, device_type: str | None = None,
          backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh[Any]:
    """Deprecated: use ``backend.bind(view, backend, ...)``."""
    moved("Backend.bind(view)", "backend.bind(view, backend)")
    return bind(view, self, device_type=device_type, backend_override=backend_override)


def _family(self: FakeGroup) -> MeshView:
    """Deprecated: use :attr:`dim_view`."""
    moved("FakeGroup.family", "FakeGroup.dim_view")
    return self.dim_view


setattr(CachedBackend, "bind", _bind)  # noqa: B010  # deprecated names, added here only
setattr(FakeGroup, "family", property(_family))  # noqa: B010
