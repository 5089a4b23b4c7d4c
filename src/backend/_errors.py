"""The error hierarchy of the backend layer.

Every error is a :class:`BackendError`, which is a ``RuntimeError`` (what torch's
``DeviceMesh`` raises for most misuse); subclasses add the other built-in torch
raises in the same place, so code written against torch keeps catching them.
"""

from __future__ import annotations

__all__ = ["BackendConfigError", "BackendError", "GroupCreationError", "NotInMeshError"]


class BackendError(RuntimeError):
    """Base class of every error raised by :mod:`backend`."""


class BackendConfigError(BackendError, ValueError):
    """A bad argument or setup: an unknown backend name or device type, a missing
    environment variable, bad options or ``backend_override`` keys, a mesh larger than
    the world, a flattened dim name that is taken, a one-dim query on a multi-dim mesh,
    slicing or flattening a mesh that has no dim names."""


class NotInMeshError(BackendError, ValueError, IndexError):
    """This process's rank is not in the universe of the view it asked a group of
    (torch raises ``IndexError`` there)."""


class GroupCreationError(BackendError):
    """Creating a process group failed (the cache keeps no entry; a retry may work)."""
