"""Where the decision finds :class:`~mesh.Topology`: the one import of it in this
sub-package (when ``Topology`` moves to its own sub-package, only this line changes)."""

from .._topology import Topology

__all__ = ["Topology"]
