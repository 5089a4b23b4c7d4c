"""Tensors moving between meshes, over torch: torch's placements as :mod:`mesh`'s and back
(``_placements``), and executing :class:`mesh.Reshard` plans with point-to-point batches
(``_exec``: one tensor, :func:`reshard_tensor`, or a whole state in one batch,
:func:`reshard_state`; ``_work``: :class:`StateWork`, its move running in the background),
boxes of tensors read from a DCP checkpoint (``_checkpoint``:
:func:`read_boxes`); ``_torch_private`` holds the private names of torch it uses.
Imports the core only; the facade's ``redistribute`` (DTensor to DTensor across meshes) is
built on it.  Torch is imported on first use.
"""

from ._checkpoint import read_boxes
from ._exec import reshard_state, reshard_tensor
from ._placements import from_torch_placements, to_torch_placements
from ._work import StateWork

__all__ = ["StateWork", "from_torch_placements", "read_boxes", "reshard_state", "reshard_tensor",
           "to_torch_placements"]
