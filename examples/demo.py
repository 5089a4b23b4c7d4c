"""A short tour of meshlayout: run ``python examples/demo.py``.

Needs no torch (the offline tools: ``layout`` and ``mesh``); process groups, which the
backend creates, need the torch extra (``pip install -e ".[torch]"``).
"""

from __future__ import annotations

from layout import CompositionError, Layout, complement, composition, logical_divide
from mesh import MeshView, blast, render, survive


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
    for view in (mesh, moe):
        print(view, {d: view.group(5, d) for d in view.names})
    shared = [(a, b) for a in mesh.names for b in moe.names if mesh.family(a) == moe.family(b)]
    print("dims with the same groups (one communicator each):", shared)

    def plan(world: MeshView) -> dict[str, MeshView]:
        return {"mesh": world, "dp_cp": world.flatten(("dp", "cp"), "dp_cp")}

    hit = blast(plan(mesh), [6])
    print("rank 6 fails: broken groups per dim",
          {f"{d.view}.{d.dim}": d.broken_groups for d in hit.entries})
    after = survive(plan, mesh, [6], drop="tp")
    print("dropping its tp slice leaves", dict(zip(after.world.names, after.world.shape)),
          "over ranks", after.world.ranks.ranks, "; rank 5's cp group kept:",
          after.is_intact("mesh", "cp", 5))


if __name__ == "__main__":
    main()
