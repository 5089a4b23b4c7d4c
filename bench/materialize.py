"""Materializing rank tensors at memory speed: the facade's ``.mesh`` vs ``torch.arange``.

Torch's ``DeviceMesh.mesh`` is a tensor of the instance's ranks; ours computes it from the
layout (strided offsets, then one gather through the rank map) and hands it to torch. The
anchor is the cheapest way to make a tensor of the same size in the same process,
``torch.arange(n)``; the target (issue 9) is ours within 20x of it at n = 2**20 ranks.

Cases (one instance of a 2**20-rank universe each, FakeBackend rank 12345):
- ``natural``: the row-major (16, 4, 64, 16, 16) mesh;
- ``transposed``: the same dims reordered (tp, pp, ep, dp, cp): strided, non-contiguous;
- ``explicit``: a (1024, 1024) view over an explicit, shuffled rank map (the gather path);
- ``flattened``: (pp, dp_cp_tp, ep) after flattening non-adjacent dims (hierarchical modes).
Each is timed ``--repeat`` times (median), interleaved with ``torch.arange`` (median);
``MeshView.groups`` of one dim and ``instances()`` are printed for information.

Run:  python bench/materialize.py           (exits 1 when a ratio exceeds 20x)
      python bench/materialize.py --smoke   (2**12 ranks, fails only on errors)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from backend import FakeBackend, bind
from mesh import MeshView

TARGET_RATIO = 20.0
RANK = 12345


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _cases(n: int) -> dict[str, MeshView]:
    k = n.bit_length() - 1  # n = 2**k, k even and >= 12
    sizes = (2 ** (k - 16), 4, 64, 16, 16) if k >= 16 else (2, 2, 2 ** (k - 8), 4, 4)
    names = ("pp", "dp", "cp", "ep", "tp")
    natural = MeshView.from_shape(sizes, names)
    order = list(range(n))
    random.Random(0).shuffle(order)
    side = 2 ** (k // 2)
    explicit = MeshView.from_ranks([order[i * side:(i + 1) * side] for i in range(side)],
                                   ("a", "b"))
    return {
        "natural": natural,
        "transposed": natural["tp", "pp", "ep", "dp", "cp"],
        "explicit": explicit,
        "flattened": natural.flatten(("dp", "cp", "tp"), "dp_cp_tp"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=None, help="timed runs per case (default 21)")
    p.add_argument("--smoke", action="store_true", help="2**12 ranks; fails only on errors")
    a = p.parse_args(argv)
    n = 2**12 if a.smoke else 2**20
    repeat = a.repeat or (3 if a.smoke else 21)
    print(f"torch {torch.__version__}; n = {n} ranks per instance; median of {repeat} runs")
    print(f"{'case':<12} {'ours .mesh ms':>14} {'arange ms':>10} {'ratio':>7}  check")
    misses: list[str] = []
    for name, view in _cases(n).items():
        fb = FakeBackend(view.ranks.max_rank + 1, RANK % (view.ranks.max_rank + 1))
        dm = bind(view, fb)
        ok = dm.mesh.tolist() == _lists(view.instance(fb.rank))
        ours = _median_ms(lambda dm=dm: dm.mesh, repeat)  # type: ignore[misc]
        anchor = _median_ms(lambda: torch.arange(n), repeat)
        ratio = ours / anchor
        print(f"{name:<12} {ours:>14.3f} {anchor:>10.3f} {ratio:>6.1f}x  "
              f"{'same ranks as instance()' if ok else 'MISMATCH'}")
        if not ok:
            misses.append(f"{name}: .mesh differs from view.instance()")
        elif ratio > TARGET_RATIO and not a.smoke:
            misses.append(f"{name}: {ratio:.1f}x torch.arange (target <= {TARGET_RATIO:.0f}x)")
    view = _cases(n)["natural"]
    print(f"\ninformation: groups('cp') of all {n} ranks "
          f"{_median_ms(lambda: view.groups('cp'), 3):.1f} ms, instances() of the "
          f"(ep, tp) slice {_median_ms(lambda: view['ep', 'tp'].instances(), 3):.1f} ms")
    if misses:
        print("FAIL: " + "; ".join(misses))
        return 1
    print("\nOK: every ours .mesh within "
          f"{TARGET_RATIO:.0f}x torch.arange" + (" (not enforced with --smoke)" if a.smoke else ""))
    return 0


def _lists(x: Any) -> Any:
    return [_lists(v) for v in x] if isinstance(x, tuple) else x


if __name__ == "__main__":
    sys.exit(main())
