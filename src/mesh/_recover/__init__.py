"""The recovery wing of :mod:`mesh`: what failed ranks break, and the views that go on.

Imports the core (``mesh._core``) only; the plan wing (``explain --fail``) and the package
import it.  Pure and rank-free, like the core: failures are data, and no universe is listed
by :func:`blast`.

Every public function is a door over a core: it checks its input once (``_door``), then
calls a core that trusts it (:func:`blast_of`, :func:`dropped`, :func:`substituted`,
:func:`survived`).  The plan wing checks a failure once with :func:`failed_ranks` and
:func:`spare_ranks` and calls the cores for each way to continue.

Module map: ``_made`` (:class:`Made`, the base of the wing's values: built only by the
wing, with ``_trusted``), ``_door`` (failed and spare ranks, views and limits checked),
``_blast`` (:func:`blast` and its values :class:`Blast`, :class:`ViewBlast`,
:class:`DimBlast`), ``_ways`` (the ways to continue, :func:`drop` and :func:`substitute`),
``_survive`` (:func:`survive` re-derives a plan, as a :class:`Survival`: which groups are
intact).
"""

from ._blast import SHOWN, Blast, DimBlast, ViewBlast, blast, blast_of
from ._door import failed_ranks, spare_ranks
from ._made import Made
from ._survive import Derivation, Survival, Tables, counted_groups, derived, survive, survived
from ._ways import drop, substitute

__all__ = ["SHOWN", "Blast", "Derivation", "DimBlast", "Made", "Survival", "Tables", "ViewBlast",
           "blast", "blast_of", "counted_groups", "derived", "drop", "failed_ranks",
           "spare_ranks", "substitute", "survive", "survived"]
