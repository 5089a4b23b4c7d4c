"""The torch being modelled: what ``check_spmd``'s creation and budget models take from the torch
version and its ``torch.distributed.config`` flags, as one value (:class:`TorchModel`).

Read in the sources of torch 2.13.0, 2.14.1 and 2.15.0 (``torch/distributed/``):

- **Hidden parent-wide split.**  A group created by its members only on a device-bound NCCL
  world is made by splitting the default group's communicator, collective over the whole
  world, when ``_new_process_group_helper`` finds a split source.  2.13 and 2.14:
  ``_get_split_source(pg)`` takes the default group's NCCL backend whatever the group asks
  for, and the members split from it when they create an NCCL communicator
  (``backend_options.split_from``); a group asking for another backend (Gloo) is made fresh.
  2.14 and 2.15 skip the non-members' split under torchcomms (``config.use_torchcomms``:
  subgroups are then a members-only rendezvous; 2.15 ``distributed_c10d.py`` l.3013-3022).
  2.15 (l.2790-2842, 2993-3002): ``_get_split_source(pg, requested_backend)`` splits only
  when the requested backend's name for the bound device equals the parent's (so ``"nccl2"``
  asked on a ``"nccl"`` world is made fresh, though 2.15's ``"nccl"`` is nccl2), and never
  for options with ``lazy_init``; ``_is_safe_to_split`` is gone.
- **Pipelining's own communicators.**  2.14: ``config.pipeline_per_direction_p2p`` (or
  torchcomms) makes a ``PipelineStage`` split its PP group twice, a downstream and an
  upstream communicator of the whole group (``pipelining/stage.py`` l.143-186, 238-247).
  2.15 renames it ``pipeline_per_edge_p2p`` (``config.py`` l.48; on with torchcomms too,
  ``pipelining/stage.py`` l.198-201): the schedule's init makes one 2-rank child per directed
  physical edge, one ``split_group`` over the PP group per round of disjoint pairs
  (``pipelining/_p2p.py`` l.66-142, 193-303; ``schedules.py`` l.483).  Every flag is off by
  default.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata

import attrs

from layout import show

from .._core import BackendConfigError
from ._events import TorchCreate

__all__ = ["FLAGS", "VERSIONS", "TorchModel", "edge_split_rounds", "pipeline_creations"]

VERSIONS = ((2, 13), (2, 14), (2, 15))
"""The torch versions modelled (an older one is refused, a newer one modelled as the newest)."""

FLAGS: Mapping[tuple[int, int], tuple[str, ...]] = {
    (2, 13): ("use_torchcomms",),
    (2, 14): ("use_torchcomms", "pipeline_per_direction_p2p"),
    (2, 15): ("use_torchcomms", "pipeline_per_edge_p2p"),
}
"""The ``torch.distributed.config`` flags modelled, by version."""

Splits = tuple[tuple[int, ...], ...]


@attrs.frozen
class TorchModel:
    """The modelled torch: its ``version`` (major, minor) and the ``config`` flags set.

    >>> TorchModel.of("2.15.0+cu132", {"pipeline_per_edge_p2p": True}).pipeline_splits(
    ...     (0, 1, 0, 1), 2)
    (((0, 1),), ((1, 0),))
    >>> TorchModel.of("2.14.1").pipeline_splits((0, 1, 2, 3), 4)
    ()
    """

    version: tuple[int, int]
    config: frozenset[str] = frozenset()

    @classmethod
    def of(cls, version: str | None = None, config: Mapping[str, bool] | None = None
           ) -> TorchModel:
        """The model of torch ``version`` (``"2.15.0"``; None: the installed torch's, else the
        newest modelled) with the ``torch.distributed.config`` flags ``config`` (None: as the
        imported torch's config says, else torch's defaults, all off)."""
        if version is None:
            version = _installed()
        if not isinstance(version, str):
            raise BackendConfigError(f"torch_version must be a version string such as '2.15.0' "
                                     f"or None, got {show(version)}")
        found = re.match(r"(\d+)\.(\d+)", version)
        if found is None or (int(found[1]), int(found[2])) < VERSIONS[0]:
            raise BackendConfigError(
                f"torch_version {version!r} is not modelled: check_spmd models torch "
                f"{VERSIONS[0][0]}.{VERSIONS[0][1]} to {VERSIONS[-1][0]}.{VERSIONS[-1][1]} "
                "(a newer torch as the newest)")
        major_minor = min((int(found[1]), int(found[2])), VERSIONS[-1])
        known = FLAGS[major_minor]
        flags = _imported_config(known) if config is None else config
        if not isinstance(flags, Mapping) or not all(isinstance(v, bool) for v in flags.values()):
            raise BackendConfigError(f"torch_config must map torch.distributed.config flag names "
                                     f"to bools, got {show(flags)}")
        unknown = sorted(set(flags) - set(known))
        if unknown:
            raise BackendConfigError(
                f"torch {major_minor[0]}.{major_minor[1]}'s torch.distributed.config has no "
                f"{', '.join(map(repr, unknown))}: its modelled flags are "
                f"{', '.join(map(repr, known))}")
        return cls(major_minor, frozenset(k for k, v in flags.items() if v))

    def words(self) -> str:
        """``torch 2.15 (pipeline_per_edge_p2p)``: the model, for the report's notes."""
        flags = f" ({', '.join(sorted(self.config))})" if self.config else ""
        return f"torch {self.version[0]}.{self.version[1]}{flags}"

    def hidden_split(self, requested: str | None, *, lazy: bool = False) -> bool:
        """Whether torch makes a group its members create alone, asking for backend
        ``requested`` (None: the default group's) with options that set ``lazy_init``
        (``lazy``), by splitting the device-bound NCCL default group: collective over the
        world, so the ranks outside it must enter too.

        >>> [TorchModel.of(v).hidden_split(b) for v in ("2.13", "2.15") for b in (None, "gloo")]
        [True, False, True, False]
        >>> TorchModel.of("2.13").hidden_split("nccl", lazy=True)
        True
        >>> TorchModel.of("2.15").hidden_split("nccl", lazy=True)
        False
        """
        if _cuda_backend(requested or "nccl") != "nccl":
            return False  # another backend than the parent's: made fresh (2.15 by name)
        if self.version >= (2, 14) and "use_torchcomms" in self.config:
            return False  # a members-only rendezvous
        return not (self.version >= (2, 15) and lazy)

    def pipeline_splits(self, stages: Sequence[int], size: int) -> tuple[Splits, ...]:
        """The ``split_group`` calls (each its splits, in ranks of the PP group, of ``size``
        ranks) a pipeline schedule over that group makes, its logical stage ``i`` on group
        rank ``stages[i]``: none unless the modelled config asks for pipelining's own
        communicators (2.14: two of the whole group; 2.15: :func:`edge_split_rounds`)."""
        if self.version == (2, 14) and {"pipeline_per_direction_p2p", "use_torchcomms"} & \
                self.config:
            whole = (tuple(range(size)),)
            return (whole, whole)
        if self.version >= (2, 15) and {"pipeline_per_edge_p2p", "use_torchcomms"} & \
                self.config:
            return edge_split_rounds(stages)
        return ()


def edge_split_rounds(stages: Sequence[int]) -> tuple[Splits, ...]:
    """Torch 2.15's ``_directed_edge_split_rounds`` (``pipelining/_p2p.py`` l.66-142): the
    distinct pairs of adjacent stages' ranks, greedily matched into rounds of disjoint
    pairs, each round then its reverse; one ``split_group`` per round, one 2-rank
    communicator per directed edge.

    >>> edge_split_rounds((0, 1, 2, 3, 0, 1, 2, 3))  # looped PP4: 8 directed edges
    (((0, 1), (2, 3)), ((1, 0), (3, 2)), ((0, 3), (1, 2)), ((3, 0), (2, 1)))
    """
    remaining = sorted({(min(a, b), max(a, b)) for a, b in itertools.pairwise(stages)
                        if a != b})
    rounds: list[Splits] = []
    while remaining:
        used: set[int] = set()
        matching, deferred = [], []
        for edge in remaining:
            if used.isdisjoint(edge):
                matching.append(edge)
                used.update(edge)
            else:
                deferred.append(edge)
        rounds += [tuple(matching), tuple((b, a) for a, b in matching)]
        remaining = deferred
    return tuple(rounds)


def pipeline_creations(model: TorchModel, stages: object, members: tuple[int, ...],
                       line: str) -> list[TorchCreate]:
    """The ``split_group`` calls ``model``'s pipelining makes for a schedule over the group of
    global ranks ``members`` (in group-rank order), its logical stage ``i`` on group rank
    ``stages[i]``, each split named in global ranks.

    >>> [e.ranks for e in pipeline_creations(TorchModel.of("2.15", {"use_torchcomms": True}),
    ...                                      (0, 1), (4, 6), "here")]
    [((4, 6),), ((6, 4),)]
    """
    size = len(members)
    if not (isinstance(stages, (list, tuple)) and stages and
            all(type(s) is int and 0 <= s < size for s in stages)):
        raise BackendConfigError(f"stages must be a non-empty list of the group rank of each "
                                 f"logical stage (ints in [0, {size})), got {show(stages)}")
    rounds = model.pipeline_splits(stages, size)
    return [TorchCreate("split_group", tuple(tuple(members[r] for r in split)
                                             for split in splits),
                        False, f"pp_p2p_round_{i}", line, parent=members)
            for i, splits in enumerate(rounds)]


def _cuda_backend(name: str) -> str | None:
    """The backend ``name`` asks for on CUDA devices (``"cpu:gloo,cuda:nccl"`` -> ``nccl``;
    a plain name is itself), as torch 2.15's ``_get_backend_name_for_device``."""
    name = name.lower()
    if ":" not in name:
        return name
    pairs = dict(p.split(":", 1) for p in name.split(",") if ":" in p)
    return pairs.get("cuda")


def _installed() -> str:
    """The installed torch's version (without importing it), else the newest modelled."""
    torch = sys.modules.get("torch")
    found = getattr(torch, "__version__", None)
    if isinstance(found, str):
        return found
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ".".join(map(str, VERSIONS[-1]))


def _imported_config(known: Sequence[str]) -> dict[str, bool]:
    """The flags ``known`` as the imported torch's ``torch.distributed.config`` holds them
    (its environment variables read; torch's defaults, all off, when it is not imported)."""
    config = sys.modules.get("torch.distributed.config")
    return {k: bool(getattr(config, k, False)) for k in known} if config is not None else {}
