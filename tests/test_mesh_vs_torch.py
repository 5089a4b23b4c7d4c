"""Differential test: ``mesh.MeshView`` against torch's ``DeviceMesh`` (2.13, 2.14; fake groups).

Every case is a small *program* (format in ``tests/torch_mesh_reference.py``; the program
list, the brute-force model, the torch runner and the comparison are in
``tests/torch_mesh_diff.py``) building meshes by ``init`` (``init_device_mesh``) / explicit
rank ``tensor`` (``DeviceMesh("cpu", t)``) / ``slice`` (``m[names]``) / ``flatten``
(``m._flatten(name)``) / ``unflatten`` (``m._unflatten(dim, sizes, names)``) / ``concat``
(``DeviceMesh._concatenate``).  Two subprocesses run the torch programs on every rank
``r < world`` (``init_process_group("fake", store=FakeStore(), rank=r, world_size=world)``,
destroyed after each rank; ``DeviceMesh`` keeps no other global state we use:
``_mesh_resources`` only holds the context-manager stack) and print JSON; this process
never imports ``torch.distributed``.
Our side runs the same program with ``MeshView`` and, for every variable, rank and dim, checks

- ``coordinate(r)``   == torch ``get_coordinate()`` (``None`` off the mesh, both sides);
- ``instance(r)``     == torch ``mesh.tolist()``;
- ``group(r, k)``     == the line of torch's ``mesh`` through ``r`` along dim ``k``, IN ORDER;
- ``sorted(group)``   == torch ``get_process_group_ranks(get_group(k))``;
- ``local_rank(r,k)`` == torch's coordinate ``k``;  ``names`` and ``shape`` == torch's;

and, wherever the brute-force model (``Model``: an explicit rank array permuted, reshaped and
selected directly) can express the construction, that torch and the model agree.  Cases:
hand-written programs plus 60 random ones (fixed seed; shapes of 1-4 dims, <= 64 ranks,
size-1 dims, permuted explicit rank tensors, tensors over a subset of a larger world, worlds
larger than the mesh; random chains of slices, flattens, unflattens and concatenations).

Torch 2.13 behaviours found, relied on or worked around (each is exercised here; 2.14 keeps them):

- Process-group ranks are SORTED.  ``DeviceMesh`` creates groups with ``new_group(ranks)``,
  whose ``sort_ranks=True`` default sorts them (pytorch#193224); a dim spanning the whole
  world reuses the default group (ranks ``0..W-1``).  So for a permuted rank tensor, a
  transposed or a non-ascending flattened dim, ``get_process_group_ranks`` is not in mesh
  order.  The ORDER of our groups is checked against the line of torch's ``mesh`` tensor
  (which is in coordinate order), the set against ``get_process_group_ranks``.  Torch's
  ``get_local_rank`` is the index in the sorted group, so it differs from its own
  ``get_coordinate()`` there (``test_torch_local_rank_is_the_sorted_index``); our
  ``local_rank`` is checked against torch's coordinate.
- Ranks off the mesh (explicit tensor over a subset of the world, or a world larger than the
  mesh): ``get_coordinate()`` is None, but ``get_group`` raises IndexError, and SLICING a
  mesh with several instances raises RuntimeError ("... it needs to contain the local rank")
  on those ranks, so flatten/unflatten/concat of such slices fail there too.  For those ranks
  (only ranks off the root mesh may fail) we check ``coordinate(r) is None`` and that
  ``group`` raises RankNotInMeshError.

Where torch refuses (or accepts what it should not), the check is against torch's
equivalent construction and/or the brute-force model:

1. Non-ascending slices, ``m["c", "a"]``: torch raises KeyError ("Mesh dim indices should be
   in ascending order").  Ours ``v["c", "a"]`` is checked against the model and against
   torch's ``DeviceMesh._concatenate([m["c"], m["a"]])`` (torch does support that).
2. Flattening dims in a non-ascending order: torch cannot slice them first (case 1), so ours
   ``v.flatten(("c", "a"))`` is compared with ``_concatenate([m["c"], m["a"]])._flatten()``.
3. Flattening while keeping the other dims (ours ``v.flatten(("a", "c"))`` on (a, b, c) is
   (a_c, b)): torch's ``_flatten`` returns only the 1-D flattened mesh; compared with
   ``_concatenate([m["a", "c"]._flatten(), m["b"]])`` and with the model.
4. Slicing a non-contiguous flattened dim from the root together with a dim it interleaves
   with: on a (2, 2, 3) mesh after ``m["a", "c"]._flatten("a_c")``, torch ``m["a_c", "b"]`` and
   ``m["b", "a_c"]`` raise KeyError (ascending order); ours ``v.flatten(("a", "c"))["a_c", "b"]``
   and ``[..., "b", "a_c"]`` are checked against the model.  (``m["a_c"]`` alone and
   ``m["a", "b_c"]`` work in torch and are compared directly.)
5. Unflattening a multi-piece (flattened) dim into sizes that cut across its pieces
   (e.g. ``m["a", "c"]._flatten()._unflatten(0, (3, 2), ...)`` on (2, 2, 3), and every
   2- and 3-factor split of every ordered flatten of (2, 3, 2) and (3, 2, 4)): torch raises a
   bare AssertionError; ours must raise NotRepresentableError, and the model must show that
   the split is not affine in rank offsets (else refusing would be a bug).  In every case
   where torch accepted an unflatten, ours accepted it too, and vice versa.
6. ``transpose`` and arbitrary chains of non-ascending slices, flattens (any order, keeping
   the other dims) and unflattens, for which torch has no API, are checked against the model
   only (``test_brute_force_walks``).
7. Torch does not check that dim names stay unique in ``_concatenate`` (``[m["b"], m["b"]]``
   with ``b`` of size 1) or in ``_unflatten`` (names ``("x", "x")``, or an existing name):
   it accepts them; ours must raise DuplicateNameError.  The random programs never
   create equal names.
8. Overlapping ``_concatenate``: torch raises RuntimeError ("Cannot concatenate overlapping
   meshes"), ours OverlapError.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from typing import Any

import pytest
from torch_mesh_diff import (
    Program,
    check_random_walk,
    factorizations,
    flatten_op,
    random_program,
    run_program,
    run_torch,
    slice_op,
)

from mesh import MeshView


# ---------------------------------------------------------------------------------------
# Cases: hand-written, then random programs from a fixed seed.
# ---------------------------------------------------------------------------------------
def handwritten() -> list[Program]:
    """The hand-written programs: the numbered cases above, size-1 dims, explicit and
    partial rank tensors, and every ordered flatten of two shapes unflattened every way."""
    progs = []

    p = Program(8, "2x2x2: slices, flatten, non-ascending via concat")
    m = p.add("init", shape=[2, 2, 2], names=["a", "b", "c"])
    for names in (["a"], ["b"], ["c"], ["a", "b"], ["a", "c"], ["b", "c"]):
        p.add("slice", src=m, names=names)
    ac = p.add("slice", src=m, names=["a", "c"])
    f = p.add("flatten", src=ac, name="a_c")
    p.ours("flatten", f, src=m, dims=["a", "c"], name="a_c", select=["a_c"])
    sc, sa = p.add("slice", src=m, names=["c"]), p.add("slice", src=m, names=["a"])
    ca = p.add("concat", srcs=[sc, sa], model=slice_op(m, ["c", "a"]))
    p.ours("slice", ca, src=m, names=["c", "a"])
    p.add("slice", src=m, names=["c", "a"])  # torch refuses (KeyError); checked vs the model
    fca = p.add("flatten", src=ca, name="c_a")
    p.ours("flatten", fca, src=m, dims=["c", "a"], name="c_a", select=["c_a"])
    sb = p.add("slice", src=m, names=["b"])
    # the merged dim goes where "c" (listed first) was
    k = p.add("concat", srcs=[sb, fca], model=flatten_op(m, ["c", "a"], "c_a"))
    p.ours("flatten", k, src=m, dims=["c", "a"], name="c_a")
    progs.append(p)

    p = Program(8, "explicit permuted rank tensor (torch sorts group ranks)")
    t = p.add("tensor", ranks=[[3, 0, 6, 5], [1, 7, 2, 4]], names=["x", "y"])
    p.add("slice", src=t, names=["y"])
    p.add("slice", src=t, names=["x"])
    p.add("flatten", src=t, name="xy")
    p.add("unflatten", src=t, dim="y", sizes=[2, 2], names=["y0", "y1"])
    sy, sx = p.add("slice", src=t, names=["y"]), p.add("slice", src=t, names=["x"])
    yx = p.add("concat", srcs=[sy, sx], model=slice_op(t, ["y", "x"]))
    p.ours("slice", yx, src=t, names=["y", "x"])
    p.ours("transpose", yx, src=t, dims=["y", "x"])
    p.add("flatten", src=yx, name="yx")
    progs.append(p)

    p = Program(12, "explicit tensor over a subset of the world (ranks off the mesh)")
    t = p.add("tensor", ranks=[[3, 0, 6], [11, 2, 9]], names=["x", "y"])
    p.add("slice", src=t, names=["y"])
    p.add("flatten", src=t, name="xy")
    p.add("unflatten", src=t, dim="y", sizes=[3, 1], names=["p", "q"])
    progs.append(p)

    p = Program(10, "init smaller than the world")
    m = p.add("init", shape=[2, 3], names=["a", "b"])
    p.add("slice", src=m, names=["b"])
    p.add("flatten", src=m, name="ab")
    progs.append(p)

    p = Program(8, "size-1 dims everywhere")
    m = p.add("init", shape=[2, 1, 4, 1], names=["a", "b", "c", "d"])
    for names in (["b"], ["d"], ["b", "d"], ["a", "b"], ["b", "c"], ["a", "b", "c", "d"]):
        p.add("slice", src=m, names=names)
    bd = p.add("slice", src=m, names=["b", "d"])
    p.add("flatten", src=bd, name="bd")
    bc = p.add("slice", src=m, names=["b", "c"])
    p.add("flatten", src=bc, name="bc")
    p.add("unflatten", src=m, dim="c", sizes=[1, 2, 1, 2], names=["w", "x", "y", "z"])
    p.add("unflatten", src=m, dim="b", sizes=[1, 1], names=["b0", "b1"])
    sd, sb = p.add("slice", src=m, names=["d"]), p.add("slice", src=m, names=["b"])
    db = p.add("concat", srcs=[sd, sb], model=slice_op(m, ["d", "b"]))
    p.ours("slice", db, src=m, names=["d", "b"])
    # torch does not check that names stay unique (case 7); ours must refuse
    p.add("concat", srcs=[sb, sb], ours_raises="DuplicateNameError")
    p.add("unflatten", src=m, dim="c", sizes=[2, 2], names=["x", "x"],
          ours_raises="DuplicateNameError")
    p.add("unflatten", src=m, dim="c", sizes=[2, 2], names=["a", "x"],
          ours_raises="DuplicateNameError")
    progs.append(p)

    for shape in ([1], [1, 1], [1, 1, 1, 1]):
        p = Program(1, f"all size-1 {shape}")
        names = ["a", "b", "c", "d"][:len(shape)]
        m = p.add("init", shape=shape, names=names)
        p.add("slice", src=m, names=names[-1:])
        p.add("flatten", src=m, name="all")
        p.add("unflatten", src=m, dim=names[0], sizes=[1, 1], names=["u", "v"])
        progs.append(p)

    p = Program(12, "(2,2,3): flattened non-contiguous dim: root slicing, unflatten, concat")
    m = p.add("init", shape=[2, 2, 3], names=["a", "b", "c"])
    ac = p.add("slice", src=m, names=["a", "c"])
    f = p.add("flatten", src=ac, name="a_c")
    bc = p.add("slice", src=m, names=["b", "c"])
    p.add("flatten", src=bc, name="b_c")
    p.add("slice", src=m, names=["a_c"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["a_c"]})
    p.add("slice", src=m, names=["a", "b_c"],
          ours={"op": "flatten", "src": m, "dims": ["b", "c"], "name": "b_c",
                "select": ["a", "b_c"]})
    # torch refuses these two (KeyError, ascending order): checked against the model
    p.add("slice", src=m, names=["a_c", "b"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["a_c", "b"]})
    p.add("slice", src=m, names=["b", "a_c"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["b", "a_c"]})
    p.add("unflatten", src=f, dim=0, sizes=[2, 3], names=["p", "q"])
    p.add("unflatten", src=f, dim=0, sizes=[6, 1], names=["p", "q"])
    p.add("unflatten", src=f, dim=0, sizes=[3, 2], names=["p", "q"])  # both refuse
    sb = p.add("slice", src=m, names=["b"])
    bf = p.add("concat", srcs=[sb, f],
               model=flatten_op(m, ["a", "c"], "a_c", select=["b", "a_c"]))
    p.ours("flatten", bf, src=m, dims=["a", "c"], name="a_c", select=["b", "a_c"])
    p.add("unflatten", src=bf, dim="a_c", sizes=[2, 3], names=["p", "q"])
    p.add("unflatten", src=bf, dim="a_c", sizes=[3, 2], names=["p", "q"])  # both refuse
    sa = p.add("slice", src=m, names=["a"])
    a2 = p.add("unflatten", src=sa, dim="a", sizes=[2], names=["a2"])  # "a" renamed
    p.add("concat", srcs=[sa, a2])  # overlapping: both refuse
    p.add("concat", srcs=[f, sb], model=flatten_op(m, ["a", "c"], "a_c", select=["a_c", "b"]))
    p.add("concat", srcs=[f, p.add("slice", src=m, names=["c"])])  # overlapping
    progs.append(p)

    p = Program(24, "(2,3,4): flatten (c,a) and unflatten it across the pieces")
    m = p.add("init", shape=[2, 3, 4], names=["a", "b", "c"])
    sc, sa = p.add("slice", src=m, names=["c"]), p.add("slice", src=m, names=["a"])
    ca = p.add("concat", srcs=[sc, sa], model=slice_op(m, ["c", "a"]))
    fca = p.add("flatten", src=ca, name="c_a")
    p.ours("flatten", fca, src=m, dims=["c", "a"], name="c_a", select=["c_a"])
    for sizes in ([4, 2], [2, 4], [2, 2, 2], [8, 1], [1, 8]):
        names = [f"u{i}" for i in range(len(sizes))]
        p.add("unflatten", src=fca, dim=0, sizes=sizes, names=names)
    progs.append(p)
    for shape, world in (([2, 3, 2], 12), ([3, 2, 4], 24)):
        p = Program(world, f"{shape}: every ordered flatten, unflattened every way")
        m = p.add("init", shape=shape, names=["a", "b", "c"])
        singles = {x: p.add("slice", src=m, names=[x]) for x in "abc"}
        for sel in [*itertools.permutations("abc", 2), *itertools.permutations("abc", 3)]:
            if list(sel) == sorted(sel):
                src = p.add("slice", src=m, names=list(sel))
            else:
                src = p.add("concat", srcs=[singles[x] for x in sel], model=slice_op(m, sel))
            name = "".join(sel)
            f = p.add("flatten", src=src, name=name)
            p.ours("flatten", f, src=m, dims=list(sel), name=name, select=[name])
            n = math.prod(shape["abc".index(x)] for x in sel)
            for parts in [*factorizations(n, 2), *factorizations(n, 3)]:
                if parts.count(1) <= 1:
                    new = [f"{name}{j}" for j in range(len(parts))]
                    p.add("unflatten", src=f, dim=name, sizes=parts, names=new)
        progs.append(p)
    return progs


def all_programs() -> list[Program]:
    """The hand-written programs, then 60 random ones from a fixed seed."""
    rng = random.Random(20260521)
    return handwritten() + [random_program(rng, i) for i in range(60)]


PROGRAMS = all_programs()


# ---------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_results(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, Any]]]:
    """Torch's answers for every program, computed once (in subprocesses)."""
    return run_torch(PROGRAMS, tmp_path_factory.mktemp("torch_mesh"))


@pytest.mark.parametrize("index", range(len(PROGRAMS)), ids=[p.label for p in PROGRAMS])
def test_against_torch(index: int, torch_results: list[list[dict[str, Any]]]) -> None:
    """Every op of the program, for every rank and dim: ours against torch's answer (for
    ours-only ops, torch's equivalent) and torch against the brute-force model where the
    model expresses the op; where torch refuses, a listed refusal, and ours refusing with
    the listed error or answering like the model."""
    run_program(PROGRAMS[index], torch_results[index], Counter())


@pytest.mark.parametrize("seed", range(30))
def test_brute_force_walks(seed: int) -> None:
    """Non-ascending slices, transposes, flattens keeping the other dims (any order), and
    unflattens of multi-piece dims, chained at random, against the explicit-array model."""
    check_random_walk(random.Random(7919 * seed + 1), f"walk {seed}")


def test_torch_local_rank_is_the_sorted_index(
        torch_results: list[list[dict[str, Any]]]) -> None:
    """Torch's ``get_local_rank`` is the index in the SORTED group, not the coordinate.

    This is why our ``local_rank`` is checked against torch's ``get_coordinate()``.
    On the explicit permuted tensor ``[[3, 0, 6, 5], [1, 7, 2, 4]]``, rank 3 sits at
    (0, 0), but its "x" group [3, 1] sorts to [1, 3] and its "y" group [3, 0, 6, 5] to
    [0, 3, 5, 6]: torch's local ranks are (1, 1).
    """
    index = next(i for i, p in enumerate(PROGRAMS) if p.label.startswith("explicit permuted"))
    res = torch_results[index][0]
    pgs = res["tables"]["pg"]
    assert res["coord"][3] == [0, 0]
    assert [pgs[i] for i in res["pg"][3]] == [[1, 3], [0, 3, 5, 6]]
    assert res["local"][3] == [1, 1]
    view = MeshView.from_ranks([[3, 0, 6, 5], [1, 7, 2, 4]], ("x", "y"))
    assert (view.local_rank(3, "x"), view.local_rank(3, "y")) == (0, 0)
    assert (view.group(3, "x"), view.group(3, "y")) == ((3, 1), (3, 0, 6, 5))


def test_every_listed_case_is_exercised(torch_results: list[list[dict[str, Any]]]) -> None:
    """Each torch refusal listed at the top happens, and the bulk of the checks is real."""
    stats: Counter[str] = Counter()
    for prog, res in zip(PROGRAMS, torch_results):
        run_program(prog, res, stats)
    assert stats["torch refused slice"] >= 3  # non-ascending slices (case 1 and case 4)
    assert stats["views vs model"] >= 3  # ... where ours answered and matched the model
    assert stats["both refused unflatten"] >= 50
    assert stats["refusals justified by the model"] >= 50
    assert stats["both refused concat"] >= 2
    assert stats["torch raised for ranks off the mesh"] >= 1
    assert stats["ours-only ops vs torch's equivalent"] >= 100
    assert stats["views vs torch and model"] >= 1000
    assert stats["ranks vs torch"] >= 10_000
