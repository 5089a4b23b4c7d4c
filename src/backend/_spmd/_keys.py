"""The meeting keys of the replay and the channels they belong to, as named values.

A key names one meeting every participant must offer (``_matcher``); a channel is the
sequence of meetings of one communicator (or one direction of a pair on it), which a
desync ends.  Each is a ``NamedTuple`` (hashed in C: the replay looks keys up a few times
per offer) whose last field, ``kind``, keeps two kinds of key with equal fields apart
(the first call and the first shrink of one group are different meetings).

>>> CallKey("tp@0", 2).n, P2PKey("pp@0", 0, 4, 0).dst
(2, 4)
>>> CallKey("g", 0) == ShrinkKey("g", 0)
False
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal, NamedTuple

__all__ = ["WORLD_CREATIONS", "CallChannel", "CallKey", "Channel", "CreateKey", "Key",
           "NewGroupKey", "P2PChannel", "P2PKey", "ParentCreationKey", "ShrinkChannel",
           "ShrinkKey", "WorldCreationKey"]


class CallKey(NamedTuple):
    """The ``n``-th collective (n from 0) on the communicator ``group`` (a ``GroupRef.key``)."""

    group: Hashable
    n: int
    kind: Literal["call"] = "call"


class P2PKey(NamedTuple):
    """The ``n``-th send from global rank ``src`` to ``dst`` on ``group`` (and its recv)."""

    group: Hashable
    src: int
    dst: int
    n: int
    kind: Literal["p2p"] = "p2p"


class CreateKey(NamedTuple):
    """The ``n``-th creation at one of our backend's barriers (a group, or a split)."""

    barrier: str
    n: int
    kind: Literal["create"] = "create"


class NewGroupKey(NamedTuple):
    """The ``n``-th ``dist.new_group(members, use_local_synchronization=True)`` named
    ``name``."""

    name: str
    members: tuple[int, ...]
    n: int
    kind: Literal["new_group"] = "new_group"


class WorldCreationKey(NamedTuple):
    """The ``n``-th of torch's world-wide creations (``new_group`` without local
    synchronization, ``split_group``): every rank makes each, in one order."""

    n: int
    kind: Literal["world-creation"] = "world-creation"


class ParentCreationKey(NamedTuple):
    """The ``n``-th ``split_group`` of the group of global ranks ``parent`` (not the world),
    making ``splits``: every rank of the parent makes each, in one order."""

    parent: tuple[int, ...]
    n: int
    splits: tuple[tuple[int, ...], ...]
    kind: Literal["parent-creation"] = "parent-creation"


class ShrinkKey(NamedTuple):
    """The ``n``-th ``shrink_group`` of ``group`` (among the members that stay)."""

    group: Hashable
    n: int
    kind: Literal["shrink"] = "shrink"


Key = CallKey | P2PKey | CreateKey | NewGroupKey | WorldCreationKey | ParentCreationKey | \
    ShrinkKey
"""A meeting of the replay."""


class CallChannel(NamedTuple):
    """The collectives on one communicator, in order."""

    group: Hashable
    kind: Literal["call"] = "call"


class P2PChannel(NamedTuple):
    """The sends from ``src`` to ``dst`` on one communicator, in order."""

    group: Hashable
    src: int
    dst: int
    kind: Literal["p2p"] = "p2p"


class ShrinkChannel(NamedTuple):
    """The shrinks of one communicator, in order."""

    group: Hashable
    kind: Literal["shrink"] = "shrink"


WORLD_CREATIONS: Literal["torch-creation"] = "torch-creation"
"""The channel of torch's world-wide creations (one for the job)."""

Channel = CallChannel | P2PChannel | ShrinkChannel | Literal["torch-creation"]
"""A sequence of meetings that a desync ends (None: a key of its own, a creation)."""
