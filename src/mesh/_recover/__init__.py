"""The recovery wing of :mod:`mesh`: what failed ranks break, and the views that go on.

Imports the core (``mesh._core``) only; nothing imports this wing but the package.  Pure and
rank-free, like the core: failures are data, and no universe is listed by :func:`blast`.

Module map: ``_door`` (failed and spare ranks, views and limits checked), ``_blast``
(:func:`blast` and its values :class:`Blast`, :class:`ViewBlast`, :class:`DimBlast`),
``_ways`` (the ways to continue, :func:`drop` and :func:`substitute`), ``_survive``
(:func:`survive` re-derives a plan, as a :class:`Survival`: which groups are intact).
"""

from ._blast import SHOWN, Blast, DimBlast, ViewBlast, blast
from ._survive import Plan, Survival, survive
from ._ways import drop, substitute

__all__ = ["SHOWN", "Blast", "DimBlast", "Plan", "Survival", "ViewBlast", "blast", "drop",
           "substitute", "survive"]
