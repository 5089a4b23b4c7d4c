"""The error hierarchy of the backend layer."""

from __future__ import annotations

__all__ = ["BackendConfigError", "BackendError", "GroupCreationError", "NotInMeshError"]


class BackendError(RuntimeError):
    """Base class of every error raised by :mod:`backend`."""


class BackendConfigError(BackendError, ValueError):
    """A bad argument: unknown backend name, missing environment variable, bad options."""


class NotInMeshError(BackendError, ValueError):
    """This process's rank is not in the universe of the view it asked a group of."""


class GroupCreationError(BackendError):
    """Creating a process group failed (the cache keeps no entry; a retry may work)."""
