"""The machine model of :mod:`mesh`: :class:`~mesh.Topology` (hosts, devices, fast domains)
and the kinds it composes.  Below the wings that ask a machine (``_draw``, ``_hang``,
``_tensor``, ``_plan``, ``_recover``); imports only the core (``mesh._core``) and
``layout``.

Read first ``_topology`` (the value and its queries), then ``_kinds`` (how ranks sit on
hosts, and hosts in fast domains: one small value per form).

| module | what it holds |
|---|---|
| ``_topology`` | :class:`Topology` (the value, its one builder, its queries), :func:`first_split` |
| ``_kinds`` | ``EvenHosts``, ``ListedHosts``, ``EvenDomains``, ``ListedDomains``: a value a form |
| ``_runs`` | checking labels, devices and runs of ranks (or hosts), and their canonical form |
| ``_topofile`` | a topology's saved data, Slurm host lists, hosts files: text and data to fields |
| ``_blocks`` | host-block arithmetic: the most hosts a group spans, from the dim layout alone |
"""

from ._kinds import Domains, EvenDomains, EvenHosts, Hosts, ListedDomains, ListedHosts
from ._topofile import expand_hosts, hosts_file_lines
from ._topology import Topology, first_split

__all__ = ["Domains", "EvenDomains", "EvenHosts", "Hosts", "ListedDomains", "ListedHosts",
           "Topology", "expand_hosts", "first_split", "hosts_file_lines"]
