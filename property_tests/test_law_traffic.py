"""Laws of the traffic estimate (``mesh.Links``) and of ``mesh.compare``'s time rows.

THE LAW of :meth:`mesh.Links.allreduce_seconds` (a first-order ring all-reduce): for
``b`` bytes per rank over a group of ``g`` ranks,

    seconds = 2 (g − 1) / g · 8 b / (gbps · 10**9) + 2 (g − 1) · latency_us · 10**-6

with the intra-host bandwidth and latency when ``inside`` and the inter-host ones
otherwise.  The expected value is computed here in exact rational arithmetic
(:class:`fractions.Fraction`) from the formula as written, never by the code under test,
and the float result must match it to 1e-12 relative.

THE LAW of ``compare``'s rows: for a random 2-D plan over 64 ranks on hosts of 4 (a
random dim order, a random stride of the tp dim), each dim's time row is the law above
applied to the dim's group size and to whether every group of the dim, listed from a NumPy
rank tensor, stays on one host; the plans' total is the sum of the rows.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mesh import Links, MeshView, Topology, compare

rates = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
delays = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)


def expected(nbytes: int, g: int, gbps: float, latency_us: float) -> Fraction:
    steps = 2 * (g - 1)
    return (Fraction(steps, g) * 8 * nbytes / (Fraction(gbps) * 10**9)
            + steps * Fraction(latency_us) / 10**6)


@given(st.integers(0, 1 << 50), st.integers(1, 1 << 20), rates, rates, delays, delays,
       st.booleans())
def test_allreduce_seconds_is_the_alpha_beta_formula(nbytes: int, g: int, intra: float,
                                                     inter: float, a_in: float, a_out: float,
                                                     inside: bool) -> None:
    links = Links(intra, inter, a_in, a_out)
    want = expected(nbytes, g, intra, a_in) if inside else expected(nbytes, g, inter, a_out)
    got = links.allreduce_seconds(nbytes, g, inside=inside)
    assert isinstance(got, float)
    assert abs(Fraction(got) - want) <= want * Fraction(1, 10**12)


@given(st.integers(0, 1 << 40), rates, delays, st.booleans())
def test_a_group_of_one_rank_costs_nothing(nbytes: int, rate: float, delay: float,
                                           inside: bool) -> None:
    assert Links(rate, rate, delay, delay).allreduce_seconds(nbytes, 1, inside=inside) == 0.0


@st.composite
def plans_2d(draw: st.DrawFn) -> tuple[np.ndarray, tuple[str, str]]:
    """A 64-rank rank tensor with dims (dp, tp) in a random order and split."""
    tp = draw(st.sampled_from([2, 4, 8, 16, 32]))
    tensor = np.arange(64).reshape(64 // tp, tp)
    if draw(st.booleans()):  # tp outer: stride 64 // tp
        tensor = np.arange(64).reshape(tp, 64 // tp).T
    return tensor, ("dp", "tp")


@given(plans_2d(), plans_2d(), st.integers(0, 1 << 32), st.integers(0, 1 << 32))
def test_compares_time_rows_follow_the_law_on_brute_force_groups(
        a: tuple[np.ndarray, tuple[str, str]], b: tuple[np.ndarray, tuple[str, str]],
        tp_bytes: int, dp_bytes: int) -> None:
    traffic = {"tp": tp_bytes, "dp": dp_bytes}
    found = compare({"a": MeshView.from_ranks(*a), "b": MeshView.from_ranks(*b)},
                    Topology(64, 4), traffic=traffic).to_dict()
    rows = {(r["dim"], r["metric"]): r["values"] for r in found["rows"]}
    totals = [Fraction(0), Fraction(0)]
    for i, (tensor, names) in enumerate((a, b)):
        for k, name in enumerate(names):
            groups = np.moveaxis(tensor, k, -1).reshape(-1, tensor.shape[k])
            inside = all(len(set((row // 4).tolist())) == 1 for row in groups)
            gbps, latency = (3600.0, 2.0) if inside else (400.0, 10.0)  # documented defaults
            want = expected(traffic[name], tensor.shape[k], gbps, latency)
            got = rows[name, "seconds"][i]
            assert abs(Fraction(got) - want) <= want * Fraction(1, 10**12)
            totals[i] += want
    for got, want in zip(rows[None, "seconds"], totals):
        assert abs(Fraction(got) - want) <= want * Fraction(1, 10**12)
