"""The :class:`Backend` protocol: what a mesh needs from communication."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from mesh import Dim, MeshView, RankMap

from ._options import GroupOptions
from ._universe import Universe

__all__ = ["Backend"]

G = TypeVar("G", covariant=True)


@runtime_checkable
class Backend(Protocol[G]):
    """This process's rank, and lazy groups per dim of a view (``G``: the group type).

    **SPMD contract.** Creating a group is collective among its members (for
    NCCL's ``split_group``, among the whole world), so every process must ask
    for groups in the same order.  :meth:`DeviceMesh.materialize` asks for
    every dim of a mesh in a fixed order for users who want creation up front.
    """

    @property
    def name(self) -> str:
        """The backend's name: ``"fake"``, ``"gloo"``, ``"nccl"``, ``"torch-fake"`` ..."""

    @property
    def torch_groups(self) -> bool:
        """Whether :meth:`get_group` returns ``torch.distributed`` process groups."""

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def world_size(self) -> int:
        """The number of processes."""

    def get_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> G:
        """This process's group along ``dim`` of ``view`` (created on first request)."""

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None
                    ) -> Any:
        """Like :meth:`get_group`, as a ``torch.distributed.ProcessGroup``."""

    def adopt(self, view: MeshView, dim: Dim, options: GroupOptions, group: Any) -> Any:
        """Use ``group`` as this rank's group along ``dim`` of ``view`` (``from_group``)."""

    def universe(self, ranks: RankMap) -> Universe:
        """The state this backend keeps for one universe (flattened dims, torch meshes)."""

    @property
    def lost(self) -> frozenset[int]:
        """The ranks :meth:`retire` was told are lost, so far."""

    def retire(self, lost: Iterable[int], *, among: Sequence[int] | None = None,
               onward: Any = None) -> Any:
        """Ranks ``lost`` are gone: end this backend's groups that hold one, keep the rest
        (``onward``: the :class:`~backend.Onward` mesh that goes on, for groups the backend
        can re-form in place instead; a backend may ignore it)."""

    def abort_groups(self, view: MeshView, options: Sequence[Any]) -> int:
        """End this rank's groups along ``view``'s dims that exist, waiting on no peer, and
        forget them (creates none); returns how many were ended."""
