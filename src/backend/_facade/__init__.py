"""torch's ``DeviceMesh`` surface, over the core (and, for torch meshes, the c10d backends
through the core's plugs): what the package's ``__init__`` uses.

- :class:`DeviceMesh` (a :class:`Binding` plus memos) and :func:`current_mesh`;
- the entry points :func:`init_device_mesh` and :func:`bind` (which check a plan's
  expectations of the machine, given or discovered through the c10d wing, before the mesh
  exists);
- :func:`read_flight_records`, a hung job's flight-recorder dumps read against a facade
  mesh or a plan (``_hang``, over :func:`mesh.read_flight_records`);
- :func:`redistribute`, a DTensor moved to another mesh (over the tensor wing);
- :func:`apply_recovery`, acting on a :class:`mesh.Way` on a live job (``_recovery``:
  rebind, the state moved in one batch, lost boxes read from a checkpoint), returning
  :class:`Recovered`;
- :class:`TorchFacadeMesh`, the mesh that is also torch's ``DeviceMesh``, loaded (with
  torch) on first use.

Inside: ``_binding`` (the value; what meshes of one root share), ``_device_mesh``,
``_adopt`` (``from_group``'s checks), ``_entry``, ``_to_torch`` (``to_torch``),
``_torch_state`` (a universe's torch-side values), ``_torch_facade`` and ``_redistribute``
(:func:`redistribute`, a DTensor to another mesh); ``_torch_private`` (every private name of
torch the facade uses, and those torch reads on a facade mesh).
"""

from typing import Any

from ._binding import Binding
from ._device_mesh import DeviceMesh, current_mesh
from ._entry import bind, init_device_mesh
from ._hang import read_flight_records
from ._recovery import Recovered, apply_recovery
from ._redistribute import redistribute, sharding_of


def __getattr__(name: str) -> Any:
    # The torch subclass imports torch.distributed: load it on first use.
    if name == "TorchFacadeMesh":
        from ._torch_facade import TorchFacadeMesh

        return TorchFacadeMesh
    raise AttributeError(f"module 'backend._facade' has no attribute {name!r}")


__all__ = ["Binding", "DeviceMesh", "Recovered", "TorchFacadeMesh", "apply_recovery", "bind",
           "current_mesh", "init_device_mesh", "read_flight_records", "redistribute",
           "sharding_of"]
