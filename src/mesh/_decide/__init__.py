"""The decision wing of :mod:`mesh`: after a failure, every way on, priced and ranked.

Beside the recovery wing (ARCHITECTURE §9): it asks ``_recover`` for the views and groups
of each way (``survived``, ``blast_of``), ``_tensor`` for the state moves (``reshard``, the
failed ranks ``down``), and the plan wing for :class:`~mesh.Topology` only (one import, in
``_machine``).  Pure and torch-free; no wing imports it.

Module map: ``_costs`` (:class:`Costs`, the price list and the law), ``_values``
(:class:`Kind`, :class:`Way`, :class:`Refusal`, :class:`Recovery`), ``_ways`` (the ways
on, unpriced, and the refused), ``_price`` (a way's moves, bytes and seconds), ``_door``
(:func:`recover`: the input checked once, then the cores trusted), ``_machine`` (where
``Topology`` comes from).
"""

from ._costs import LINK_TIERS, Costs
from ._door import MAX_STATE_TENSORS, lost_boxes, recover
from ._values import BYTE_TIERS, Kind, Recovery, Refusal, Way

__all__ = ["BYTE_TIERS", "LINK_TIERS", "MAX_STATE_TENSORS", "Costs", "Kind", "Recovery",
           "Refusal", "Way", "lost_boxes", "recover"]
