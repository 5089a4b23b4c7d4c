"""Views over 2**40 ranks: transforms and per-rank queries never enumerate the universe.

The view is ``(a, b, c, d) = (1024, 1024, 1024, 1024)`` over the identity map,
so rank ``r = a*2**30 + b*2**20 + c*2**10 + d`` (row-major).  Every expected
value below is that arithmetic, done here by hand.

"Answers at once" is checked without a clock: each test runs under
:func:`_bounded`, which fails as soon as the code under test has executed more
than ``EVENT_BUDGET`` Python trace events (calls and lines) or holds more than
``PEAK_BYTES`` of memory (``tracemalloc``).  Listing even 2**20 of the 2**40
ranks breaks both bounds; a few groups of 1024 ranks stay far below them.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager

import pytest
from work_bound import bounded

from mesh import MAX_LISTED_RANKS, MeshView, TooManyRanksError, render

K = 1024
N = K**4
PEAK_BYTES = 2 * 2**20  # 2 MiB: a few groups of 1024 ranks, never O(N) or O(2**20)
EVENT_BUDGET = 200_000  # Python calls + lines, summed over one test

A, B, C, D = 123, 456, 789, 1000
RANK = A * 2**30 + B * 2**20 + C * 2**10 + D


def _rank(a: int, b: int, c: int, d: int) -> int:
    return a * 2**30 + b * 2**20 + c * 2**10 + d


def _bounded() -> AbstractContextManager[None]:
    """Fail fast if the block does work or holds memory on the order of the universe."""
    return bounded(EVENT_BUDGET, PEAK_BYTES)


def test_the_bound_catches_enumeration(monkeypatch: pytest.MonkeyPatch) -> None:
    import mesh._core._listing as listing

    monkeypatch.setattr(listing, "_most_bytes", lambda: 1 << 62)  # the memory guard lifted
    view = MeshView.from_shape((2**37, 2, 2, 2), ("w", "a", "b", "c"))
    with pytest.raises(AssertionError, match=r"enumerates|materializes"), _bounded():
        view["a", "b", "c"].instances(limit=2**40)  # the size guard lifted on purpose


def test_listing_the_universe_is_refused_by_default() -> None:
    view = MeshView.from_shape((2**37, 2, 2, 2), ("w", "a", "b", "c"))
    with _bounded():
        with pytest.raises(TooManyRanksError, match=r"1,099,511,627,776 ranks.*limit="):
            view["a", "b", "c"].instances()
        with pytest.raises(TooManyRanksError, match=r"groups\('w'\)"):
            view.groups("w")
        with pytest.raises(TooManyRanksError, match=r"group along 'w' would list 137,438,953,472"):
            view.group(5, "w")


def test_the_default_limit_is_max_listed_ranks() -> None:
    """One rank past :data:`mesh.MAX_LISTED_RANKS` (2**24) is refused without ``limit=``,
    naming the default; the same listing is refused at once under any smaller limit."""
    assert MAX_LISTED_RANKS == 2**24
    one_past = MeshView.from_shape((MAX_LISTED_RANKS + 1, 1), ("w", "one"))
    with _bounded():
        with pytest.raises(TooManyRanksError, match=r"16,777,217 ranks, more than "
                           r"16,777,216; .*mesh\.MAX_LISTED_RANKS = 16,777,216"):
            one_past.groups("one")
        with pytest.raises(TooManyRanksError, match="limit=3"):
            one_past.groups("one", limit=3)
    assert one_past.group(5, "one") == (5,)


@pytest.fixture
def huge() -> MeshView:
    return MeshView.from_shape((K, K, K, K), ("a", "b", "c", "d"))


def test_universe_size(huge: MeshView) -> None:
    assert huge.size() == N == 2**40
    assert huge.shape == (K, K, K, K)


def test_coordinate_local_rank_and_group(huge: MeshView) -> None:
    with _bounded():
        assert huge.coordinate(RANK) == (A, B, C, D)
        assert huge.coordinate(N) is None
        assert huge.coordinate(N - 1) == (K - 1,) * 4
        assert [huge.local_rank(RANK, n) for n in "abcd"] == [A, B, C, D]
        assert huge.group(RANK, "c") == tuple(_rank(A, B, i, D) for i in range(K))
        assert huge.group(RANK, "a") == tuple(_rank(i, B, C, D) for i in range(K))


def test_slicing(huge: MeshView) -> None:
    with _bounded():
        sliced = huge["d", "b"]
        assert sliced.shape == (K, K)
        assert sliced.coordinate(RANK) == (D, B)
        assert sliced.local_rank(RANK, "b") == B
        assert sliced.group(RANK, "b") == tuple(_rank(A, i, C, D) for i in range(K))
        assert sliced.group(RANK, "d") == tuple(_rank(A, B, C, i) for i in range(K))


def test_flattening_non_adjacent_dims(huge: MeshView) -> None:
    with _bounded():
        flat = huge.flatten(("d", "b"))  # d outer, b inner; placed where d was
        assert flat.names == ("a", "c", "d_b")
        assert flat.shape == (K, K, K * K)
        assert flat.coordinate(RANK) == (A, C, D * K + B)
        assert flat.local_rank(RANK, "d_b") == D * K + B
        assert flat.group(RANK, "c") == tuple(_rank(A, B, i, D) for i in range(K))


def test_unflattening_a_flattened_dim(huge: MeshView) -> None:
    with _bounded():
        # d_b = D*1024 + B is split row-major into (32, 32768) = (x, y).
        split = huge.flatten(("d", "b")).unflatten("d_b", (32, 32768), ("x", "y"))
        i = D * K + B
        assert split.coordinate(RANK) == (A, C, i // 32768, i % 32768)

        def member(x: int) -> int:
            j = x * 32768 + i % 32768
            return _rank(A, j % K, C, j // K)

        assert split.group(RANK, "x") == tuple(member(x) for x in range(32))


def test_unflattening_a_plain_dim(huge: MeshView) -> None:
    with _bounded():
        split = huge.unflatten("a", (2, 512), ("a0", "a1"))
        assert split.coordinate(RANK) == (A // 512, A % 512, B, C, D)
        assert split.group(RANK, "a0") == (_rank(A % 512, B, C, D), _rank(512 + A % 512, B, C, D))


def test_transpose_rename_and_equality(huge: MeshView) -> None:
    with _bounded():
        t = huge.transpose().rename({"a": "z"})
        assert t.coordinate(RANK) == (D, C, B, A)
        assert t.transpose().rename({"z": "a"}) == huge
        assert hash(huge.transpose().transpose()) == hash(huge)
        assert repr(huge) == "MeshView(a=1024, b=1024, c=1024, d=1024)"


def test_render_draws_a_huge_view_at_once(huge: MeshView) -> None:
    # Panels (a, b), rows c, columns d: rank's panel, row and column are among those shown.
    with _bounded():
        text = render(huge, RANK)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    assert text.count(f"[{RANK}]") == 1
    assert f"({_rank(A, B, C, 0)})" in text and f"({_rank(A, B, 0, D)})" in text
    assert lines[-6].split()[-1] == str(N - 1)  # the last rank, bottom right
    assert f"a={A} b={B}" in lines and f"a={K - 1} b={K - 1}" in lines
    assert sum(x.startswith("a=") for x in lines) == 8  # panels shown
    skipped = [int(m.replace(",", "")) for m in re.findall(r"… ([\d,]+) more panels", text)]
    assert sum(skipped) == K * K - 8
    assert all(x.endswith("(1,024 ranks)") for x in lines[-4:])


def test_render_of_a_torchtitan_sized_view_does_work_of_one_group() -> None:
    """(Its seconds, about 3 ms against a 0.25 s target: ``bench/time_bounds.py``.)"""
    view = MeshView.from_shape((4, 8, 1024, 2, 16), ("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    with _bounded():
        text = render(view, 2**19 + 12345)
    assert max(map(len, text.splitlines())) <= 120
    assert "  dp_shard group (" in text and "(1,024 ranks)" in text


def test_render_draws_one_instance_of_a_huge_family() -> None:
    # 2**37 instances of shape (2, 2, 2); instance 0 is ranks 0..7 (offset 0 onwards).
    view = MeshView.from_shape((2**37, 2, 2, 2), ("w", "a", "b", "c"))["a", "b", "c"]
    with _bounded():
        text = render(view)
        marked = render(view, RANK)
    grid = "\n".join(text.splitlines()[1:])
    assert sorted(map(int, re.findall(r"(?<![\d=])\d+", grid))) == list(range(8))
    assert f"[{RANK}]" in marked and f"({RANK ^ 1})" in marked


def test_a_listing_larger_than_a_quarter_of_the_machines_memory_is_refused_up_front() -> None:
    """With ``limit`` lifted, a listing NumPy would allocate lazily (and the kernel then kill
    the process for) is refused before any allocation, saying how much it needs."""
    view = MeshView.from_shape((2**37, 2, 2, 2), ("w", "a", "b", "c"))
    with _bounded(), pytest.raises(TooManyRanksError, match=r"16384\.0 GiB.*quarter"):
        view["a", "b", "c"].instances(limit=2**40)
