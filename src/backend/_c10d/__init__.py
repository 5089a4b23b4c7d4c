"""Creating torch process groups, over the core: what the rooms above may use.

- :class:`GroupSpec` and its :class:`Plan`: one group request as a value (torch-free);
- :func:`discover_topology` and :class:`DiscoveryRecord`: the job's machine, gathered
  through the default store (torch loaded on first use);
- the c10d backends, loaded (with torch) on first use: :class:`C10dBackend`,
  :class:`GlooBackend`, :class:`NcclBackend`, :class:`TorchFakeBackend`, and the two
  factories the package's ``__init__`` plugs into the core, :func:`process_default` and
  :func:`torch_fake`.

Inside: ``_spec`` (the request); the creation barrier in the store: ``_rendezvous`` (the
protocol and its steps, its threat model) over ``_rounds`` (a round's values and an
attempt), ``_store`` (namespaced keys, pooled connections), ``_records`` (every value the
barrier and liveness keep in the store, each with one writer and one strict reader, and the
bounded strict JSON read), ``_liveness`` (each rank's record and beat; who is silent) and
``_diagnosis`` (the closer's look at a failed round, its waiting policy and reasons);
``_torch_groups`` (torch's creation and teardown); ``_loss`` (losing ranks: a failed
collective diagnosed, the survivors' agreement on failed groups, ending and shrinking)
with ``_reconfigure`` (a broken Gloo group re-formed in place, or why not);
``_backends`` (the backends); ``_discover`` (each rank's record of where it runs, gathered
into a topology); ``_torch_private`` (every private name of torch the sub-package uses).
"""

from typing import Any

from ._discover import DiscoveryRecord, discover_topology
from ._spec import GroupSpec, Plan, ascending_groups
from ._store import job_namespace

_TORCH = ("C10dBackend", "GlooBackend", "NcclBackend", "TorchFakeBackend", "process_default",
          "torch_fake")


def __getattr__(name: str) -> Any:
    # The backends import torch.distributed: load them on first use.
    if name in _TORCH:
        from . import _backends

        return getattr(_backends, name)
    raise AttributeError(f"module 'backend._c10d' has no attribute {name!r}")


__all__ = ["DiscoveryRecord", "GroupSpec", "Plan", "ascending_groups", "discover_topology",
           "job_namespace", *_TORCH]
