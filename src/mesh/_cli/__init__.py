"""The ``meshlayout`` command: flags in, the wings' answers out as text, JSON or SVG.

The top of :mod:`mesh`: it imports the plan wing (``explain``, ``compare``, ``place``, what a
failure does), the drawing wing (``--svg``), the decision (``recover``), the tensor wing
(``reshard``) and the hang wing (``hang``); no wing imports it, and ``import mesh`` does not
load it (``python -m mesh`` and the console script do).

| module | what it holds |
|---|---|
| ``_main`` | :func:`main`: one function a subcommand, each reading its flags and printing |
| ``_parser`` | the subcommands and their flags, with help and examples |
| ``_args`` | the argument types (rank lists, sizes, numbers) and their refusals |
| ``_planfile`` | reading a plan file (``VIEWS``, ``WORLD``, ``PLAN``, ``TENSORS``, ``TOPOLOGY``) |
| ``_machine`` | the machine ``--topology``, ``--hosts`` or ``--hosts-file`` names |
| ``_differ`` | where that machine differs from the plan's topology |
| ``_moves`` | the data and picture of ``reshard`` |

Read ``_main`` first: each subcommand is one function there.
"""

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``meshlayout`` command (exit status: 0 done, 1 a finding, 2 bad input)."""
    from ._main import main as run

    return run(argv)
