"""Every private name of torch that ``backend._spmd`` uses, each imported here once (ARCHITECTURE
§8): what it is for, and the torch releases it was checked on.  No other module of the
sub-package reads a torch private name (``tests/test_torch_private.py`` checks both: that torch
still has each name of :data:`REGISTRY`, and that nothing else reads one).

Imports torch: only ``_torch`` imports this module, for programs checked with ``torch=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.distributed_c10d as c10d

# The mode that sees every collective the dispatcher runs; checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["ABORT_PROCESS_GROUP", "REGISTRY", "WARN_NOT_IN_GROUP", "TorchDispatchMode",
           "allgather_base", "c10d_functional", "c10d_functional_autograd", "dtensor_ops",
           "hash_ranks_to_str", "reduce_scatter_base", "resolve_process_group"]

# The functional collectives' op namespace (what DTensor and TP's hooks issue);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
c10d_functional: Any = torch.ops._c10d_functional

# The autograd-aware functional collectives' op namespace; checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
c10d_functional_autograd: Any = torch.ops._c10d_functional_autograd

# DTensor's op namespace (``shard_dim_alltoall``, a redistribute's all-to-all);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
dtensor_ops: Any = torch.ops._dtensor

# The eager all_gather into one tensor (``c10d::_allgather_base_``);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
allgather_base: Any = torch.ops.c10d._allgather_base_

# The eager reduce_scatter from one tensor (``c10d::_reduce_scatter_base_``);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
reduce_scatter_base: Any = torch.ops.c10d._reduce_scatter_base_

# A functional collective's group name -> the process group; checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
resolve_process_group: Callable[[Any], Any] = \
    c10d._resolve_process_group  # type: ignore[attr-defined]  # private: not in torch's stubs

# The name torch gives a group created with use_local_synchronization on a rank outside it;
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
hash_ranks_to_str: Callable[[list[int]], Any] = c10d._hash_ranks_to_str

# The names of torch's private entry points the recorder patches where loaded modules hold
# them (read there by name, at each run); checked on torch 2.13.0, 2.14.1 and 2.15.0.
ABORT_PROCESS_GROUP = "_abort_process_group"  # ending a group without waiting (lifecycle)
WARN_NOT_IN_GROUP = "_warn_not_in_group"  # torch's skip of a call on a group the rank is not in

FUNCTIONAL_OPS = ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
                  "broadcast", "broadcast_", "all_gather_into_tensor",
                  "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
                  "reduce_scatter_tensor", "reduce_scatter_tensor_out",
                  "reduce_scatter_tensor_coalesced", "all_to_all_single", "isend", "irecv",
                  "batch_p2p_ops")
"""The ops of ``torch.ops._c10d_functional`` the recorder reads."""

FUNCTIONAL_AUTOGRAD_OPS = ("all_gather_into_tensor", "reduce_scatter_tensor",
                           "all_to_all_single")
"""The ops of ``torch.ops._c10d_functional_autograd`` the recorder reads."""

REGISTRY: tuple[tuple[str, str], ...] = (
    ("torch.utils._python_dispatch.TorchDispatchMode",
     "the dispatch mode that sees every collective a checked torch program runs"),
    *((f"torch.ops._c10d_functional.{op}.default",
       f"the functional {op}, recorded (DTensor's and TP's collectives)")
      for op in FUNCTIONAL_OPS),
    *((f"torch.ops._c10d_functional_autograd.{op}.default",
       f"the autograd-aware functional {op}, recorded") for op in FUNCTIONAL_AUTOGRAD_OPS),
    ("torch.ops._dtensor.shard_dim_alltoall.default",
     "DTensor's shard-to-shard all-to-all, recorded"),
    ("torch.ops.c10d._allgather_base_.default",
     "the eager all_gather into one tensor, recorded"),
    ("torch.ops.c10d._reduce_scatter_base_.default",
     "the eager reduce_scatter from one tensor, recorded"),
    ("torch.distributed.distributed_c10d._resolve_process_group",
     "a functional collective's group name -> the process group it runs on"),
    ("torch.distributed.distributed_c10d._hash_ranks_to_str",
     "the name of a locally synchronized new_group, on a rank outside it"),
    (f"torch.distributed.distributed_c10d.{ABORT_PROCESS_GROUP}",
     "patched for the run: a program's abort of a group, recorded (lifecycle)"),
    (f"torch.distributed.distributed_c10d.{WARN_NOT_IN_GROUP}",
     "patched for the run: a call on a group the rank is not in, which torch skips"),
)
"""(torch's name, what ``backend._spmd`` uses it for), one entry per name above (an op
namespace by each op read from it)."""
