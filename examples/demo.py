"""A short tour of meshlayout: run ``python examples/demo.py``."""

from __future__ import annotations

from backend import FakeBackend, bind
from layout import CompositionError, Layout, complement, composition, logical_divide
from mesh import MeshView, render


def main() -> None:
    world = Layout((2, 2, 2))  # (dp, cp, tp) over 8 ranks, row-major
    print("world layout            ", world)
    tp = world[2]
    starts = complement(tp, 8)
    print("tp mode                 ", tp, "-> tp groups start at",
          [starts(i) for i in range(starts.size)])
    print("8 ranks split into tiles", logical_divide(Layout(8), Layout(2)))
    print("(dp,cp,tp) ∘ (4,2)       ", composition(world, Layout((4, 2))))
    try:
        composition(Layout((6, 4), (5, 1)), Layout(6))
    except CompositionError as err:
        print("refused, not wrong:      ", err)

    mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    print()
    print(render(mesh, 5))
    moe = MeshView.from_shape(8, ("world",)).unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp"))
    fake = FakeBackend(world_size=8, rank=5)
    for view in (mesh, moe):
        bound = bind(view, fake)
        print(view, {d: bound.get_group(d).ranks for d in view.names})
    print("groups created on rank 5:", [r.dim for r in fake.created], "(shared where equal)")


if __name__ == "__main__":
    main()
