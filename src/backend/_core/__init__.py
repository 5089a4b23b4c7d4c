"""The torch-free core of ``backend``: the contract the rooms above it (``_c10d``, ``_spmd``,
``_facade``) build on, and all they may use of it.

- **What a backend is:** :class:`Backend` (the protocol the facade binds to) and
  :class:`CachedBackend`, the base every backend shares (rank checks, the group cache,
  universes, losing ranks: :meth:`~CachedBackend.retire` returns :class:`Retired`, told the
  :class:`Onward` mesh says how it re-formed each broken group (:class:`Reformed`,
  :class:`How`), and leaves one value, ``_loss.Loss``, that ``get_group`` asks before its
  cache);
  :class:`Universe`, a backend's state for one rank map.
- **A group request:** :class:`GroupOptions` (and the forms torch's ``backend_override``
  takes, :data:`Override`, normalized by :func:`as_options`, :func:`dim_options` and
  :func:`normalize_overrides`); the cache's :class:`GroupKey` and :class:`CreationRecord`;
  a family's group as this rank sees it: :func:`family_view`, :func:`members`,
  :func:`holds_any`.
- **The value backend:** :class:`FakeBackend` and its :class:`FakeGroup`.
- **The process's backend per device type** and the plug slots the package's ``__init__``
  fills with the wings: :func:`register`, :func:`process_backend`, :func:`overriding`,
  :func:`plug`, :func:`plugged`.
- **Errors:** :class:`BackendError` and its subclasses; :func:`need_torch`, the one check
  that torch is installed before a wing loads it.

A backend author reads this list, then ``_base`` (the one class to subclass) and
``_protocol``.
"""

from ._base import CachedBackend, Retired
from ._cache import CacheObserver, CreationRecord, GroupKey
from ._errors import (
    BackendConfigError,
    BackendError,
    DiscoveryError,
    ExpectationError,
    GroupCreationError,
    MembersMissingError,
    NotAMemberError,
    PeerLostError,
    RankLostError,
    ReentrantCreationError,
    StoreRecordError,
    TorchMissingError,
    UnsupportedTorchError,
    need_torch,
)
from ._fake import FakeBackend, FakeGroup
from ._members import family_view, holds_any, members
from ._options import GroupOptions, Override, as_options, dim_options, normalize_overrides
from ._protocol import Backend
from ._reform import How, Onward, Reformed
from ._registry import overriding, plug, plugged, process_backend, register
from ._universe import Universe
from ._versions import (
    TESTED_TORCH,
    UNTESTED_TORCH_ENV,
    require_tested_torch,
    untested_torch,
    warn_if_untested_torch,
)

__all__ = [
    "TESTED_TORCH",
    "UNTESTED_TORCH_ENV",
    "UnsupportedTorchError",
    "require_tested_torch",
    "Backend",
    "BackendConfigError",
    "BackendError",
    "CacheObserver",
    "CachedBackend",
    "CreationRecord",
    "DiscoveryError",
    "ExpectationError",
    "FakeBackend",
    "FakeGroup",
    "GroupCreationError",
    "GroupKey",
    "GroupOptions",
    "How",
    "MembersMissingError",
    "NotAMemberError",
    "Onward",
    "Override",
    "PeerLostError",
    "RankLostError",
    "ReentrantCreationError",
    "StoreRecordError",
    "Reformed",
    "Retired",
    "TorchMissingError",
    "need_torch",
    "Universe",
    "as_options",
    "dim_options",
    "family_view",
    "holds_any",
    "members",
    "normalize_overrides",
    "overriding",
    "plug",
    "plugged",
    "process_backend",
    "register",
    "untested_torch",
    "warn_if_untested_torch",
]
