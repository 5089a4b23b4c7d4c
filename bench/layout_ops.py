"""Time the layout algebra against torch's pycute copy and NVIDIA's pycute, op by op.

Run:  python bench/layout_ops.py            (full run; exits 1 if a target is missed)
      python bench/layout_ops.py --smoke    (tiny run for CI; fails only on errors)

One fixed seed generates random *admissible* cases per operation (layouts of depth <= 2 and
rank <= 4; right operands derived from the left one so that the composition is admissible).
A case is kept only if all three libraries accept it and give the same answer: ours directly,
``torch.distributed._pycute`` (row-major, directly comparable; its divide/product put the tile
first, so their two top-level modes are swapped before comparing) and ``pycute`` (column-major,
compared through ``rev``, which reverses modes at every level).  Every library's inputs are
built before timing; pycute gets the mirrored ones.

Each timed pass calls one library's function once on every case of one op, timed in chunks
of 10 cases (``time.perf_counter_ns``, garbage collector off).  A round is one pass of each
column, in rotating order; over the rounds each chunk's median is taken, and the table gives
the sum of a column's chunk medians divided by the number of cases (µs per call).
Ours gets two columns: "cold" clears every ``functools.lru_cache`` in ``layout`` before the pass
(the cases are distinct, so every top-level call misses), "warm" repeats the pass with the
caches full.  The target (issues 2 and 5) is ours <= 1.0x torch's copy on every op; the exit
status is 1 when the *cold* ratio exceeds 1.0 on any op (never with ``--smoke``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import math
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pycute  # type: ignore[import-untyped]
import torch
from _common import layout_caches

import layout as lay
from layout import IntTuple, Layout, LayoutError

Args = tuple[Any, ...]

SEED = 20250607
FACTORS = (1, 2, 2, 2, 3, 3, 4, 4, 6, 8)
MAX_SIZE = 1 << 12
EXPECTED_CACHES = {"coalesce", "compose", "complement", "right_inverse", "left_inverse"}
LIBS = ("ours", "torch", "pycute")

tcute: Any = importlib.import_module("torch.distributed._pycute")  # torch's row-major copy


# ---- our memo caches ---------------------------------------------------------------------------
CACHES = layout_caches()


def clear_caches() -> None:
    for clear in CACHES.values():
        clear()


# ---- the mirror ----------------------------------------------------------------------------
def rev(t: Any) -> Any:
    """Reverse the modes of a nested int tuple at every level."""
    return tuple(rev(x) for x in reversed(t)) if isinstance(t, tuple) else t


def to_lib(x: Any, lib: str) -> Any:
    """Our argument as ``lib`` wants it: Layouts converted, tuples mirrored for pycute."""
    if isinstance(x, Layout):
        if lib == "torch":
            return tcute.Layout(x.shape, x.stride)
        if lib == "pycute":
            return pycute.Layout(rev(x.shape), rev(x.stride))
        return x
    if isinstance(x, tuple):
        items = reversed(x) if lib == "pycute" else x
        return tuple(to_lib(v, lib) for v in items)
    return x


def normalize(result: Any, lib: str, swap: bool) -> Any:
    """A result in our convention, comparable across libraries."""
    if isinstance(result, (Layout, tcute.Layout, pycute.Layout)):
        shape, stride = result.shape, result.stride
        if lib == "pycute":
            shape, stride = rev(shape), rev(stride)
        if swap and lib == "torch":  # torch's copy: (tile, rest) and (A, repetition)
            assert isinstance(shape, tuple) and isinstance(stride, tuple)
            shape, stride = (shape[1], shape[0]), (stride[1], stride[0])
        return ("L", shape, stride)
    return rev(result) if lib == "pycute" else result


# ---- random cases ------------------------------------------------------------------------------
def nest(items: list[Any], rng: random.Random) -> Any:
    """Group consecutive ``items`` (at most 12) into <= 4 modes, each a leaf or <= 3 leaves."""
    n = len(items)
    if n == 1 and rng.random() < 0.5:
        return items[0]
    k = rng.randint(math.ceil(n / 3), min(4, n))
    sizes = [1] * k
    for _ in range(n - k):
        sizes[rng.choice([g for g in range(k) if sizes[g] < 3])] += 1
    out: list[Any] = []
    pos = 0
    for size in sizes:
        out.append(items[pos] if size == 1 else tuple(items[pos:pos + size]))
        pos += size
    return tuple(out)


def nested_layout(modes: list[tuple[int, int]], rng: random.Random) -> Layout:
    """A Layout with the flat (size, stride) ``modes``, randomly grouped (depth <= 2)."""
    grouped = nest(list(range(len(modes))), rng)

    def pick(g: Any, k: int) -> IntTuple:
        return tuple(pick(x, k) for x in g) if isinstance(g, tuple) else modes[g][k]

    return Layout(pick(grouped, 0), pick(grouped, 1))


def random_sizes(rng: random.Random, lo: int = 1, hi: int = 6) -> list[int]:
    while True:
        sizes = [rng.choice(FACTORS) for _ in range(rng.randint(lo, hi))]
        if math.prod(sizes) <= MAX_SIZE:
            return sizes


def random_strides(sizes: list[int], kind: str, rng: random.Random) -> list[int]:
    """compact (permuted), gaps (injective, tractable), broadcast (stride-0 modes), random."""
    if kind == "random":
        return [rng.choice((0, 1, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24)) for _ in sizes]
    order = list(range(len(sizes)))
    if rng.random() < 0.6:
        rng.shuffle(order)
    strides = [0] * len(sizes)
    cur = 1
    for k in reversed(order):
        if kind != "compact" and rng.random() < 0.25:
            cur *= rng.choice((2, 3))
        strides[k] = cur
        cur *= sizes[k]
    if kind == "broadcast":
        strides = [0 if rng.random() < 0.3 else d for d in strides]
    return strides


def random_layout(rng: random.Random, kinds: Sequence[str], lo: int = 1, hi: int = 6) -> Layout:
    sizes = random_sizes(rng, lo, hi)
    return nested_layout(list(zip(sizes, random_strides(sizes, rng.choice(kinds), rng))), rng)


ANY = ("compact", "compact", "gaps", "gaps", "broadcast", "random", "random")
TRACTABLE = ("compact", "gaps", "gaps", "broadcast")
INJECTIVE = ("compact", "gaps")


def refine(n: int, rng: random.Random) -> list[int]:
    """Split ``n`` into an ordered list of factors."""
    parts: list[int] = []
    while n > 1 and rng.random() < 0.5:
        divisors = [d for d in range(2, n) if n % d == 0]
        if not divisors:
            break
        d = rng.choice(divisors)
        parts.append(d)
        n //= d
    parts.append(n)
    rng.shuffle(parts)
    return parts


def derived_tiler(A: Layout, rng: random.Random, broadcast: bool) -> Layout | None:
    """A right operand admissible against A: modes of a refinement of A's flat shape.

    Split every flat mode of A into factors, give the factors their row-major compact
    strides, keep a random non-empty subset of them in a random order (some as stride-0
    broadcasts), and nest the result.  Each kept mode then lies inside one mode of A.
    """
    refined = [p for s in lay.flatten(A.shape) for p in refine(s, rng)]
    strides = lay.flatten(lay.suffix_product(tuple(refined)))
    modes = [(s, d) for s, d in zip(refined, strides) if s > 1]
    if not modes:
        return None
    kept = [m for m in modes if rng.random() < 0.6] or [rng.choice(modes)]
    if len(kept) > 12:  # keep rank <= 4 and depth <= 2
        kept = rng.sample(kept, 12)
    if rng.random() < 0.5:
        rng.shuffle(kept)
    if broadcast:
        kept = [(s, 0) if rng.random() < 0.1 else (s, d) for s, d in kept]
    return nested_layout(kept, rng)


def make_composition(rng: random.Random) -> Args | None:
    A = random_layout(rng, ANY)
    B = derived_tiler(A, rng, broadcast=True)
    return None if B is None else (A, B)


def make_complement(rng: random.Random) -> Args:
    A = random_layout(rng, TRACTABLE)
    cosize = A.cosize
    M = rng.choice((1, cosize, cosize * rng.randint(2, 4), rng.randint(1, 2 * cosize)))
    return (A, M)


def make_logical_divide(rng: random.Random) -> Args | None:
    A = random_layout(rng, ANY)
    B = derived_tiler(A, rng, broadcast=False)
    return None if B is None else (A, B)


def make_logical_product(rng: random.Random) -> Args:
    return (random_layout(rng, TRACTABLE, 1, 4), random_layout(rng, TRACTABLE, 1, 3))


def make_zipped_divide(rng: random.Random) -> Args | None:
    A = random_layout(rng, ANY)
    tiler: list[Any] = []
    for mode in A:
        r = rng.random()
        if r < 0.1:
            tiler.append(None)
        elif r < 0.3:  # an int n means n:1; take a product of trailing factors of the mode
            inner = [f for s in lay.flatten(mode.shape) for f in refine(s, rng)]
            tiler.append(math.prod(inner[rng.randrange(len(inner)):]))
        else:
            B = derived_tiler(mode, rng, broadcast=False)
            tiler.append(B if B is not None else 1)
    return (A, tuple(tiler))


def sample_indices(A: Layout, rng: random.Random) -> list[int]:
    n = A.size
    return list(range(n)) if n <= 4 else sorted(rng.sample(range(n), 4))


@dataclass
class Op:
    """One benchmarked operation: its functions in each library and how to make cases."""

    name: str
    fns: dict[str, Callable[..., Any]]
    make: Callable[[random.Random], list[Args]]
    swap: bool = False  # torch's copy orders the two top-level modes the other way


def one(maker: Callable[[random.Random], Args | None]) -> Callable[[random.Random], list[Args]]:
    def make(rng: random.Random) -> list[Args]:
        args = maker(rng)
        return [] if args is None else [args]
    return make


def per_index(build: Callable[[Layout, int], Args]) -> Callable[[random.Random], list[Args]]:
    def make(rng: random.Random) -> list[Args]:
        A = random_layout(rng, ANY)
        return [build(A, i) for i in sample_indices(A, rng)]
    return make


def _single(kinds: Sequence[str]) -> Callable[[random.Random], list[Args]]:
    return lambda rng: [(random_layout(rng, kinds),)]


def enumerated_injective(lib: Any) -> Callable[[Any], bool]:
    """The anchor for is_injective: neither torch's copy nor pycute has one, so a user of
    either lists the image (``len({L(i)}) == size``), which is what this times."""
    def injective(L: Any) -> bool:
        n = lib.size(L)
        return len({L(i) for i in range(n)}) == n
    return injective


OPS: list[Op] = [
    Op("coalesce", {"ours": lay.coalesce, "torch": tcute.coalesce, "pycute": pycute.coalesce},
       _single(ANY)),
    Op("filter", {"ours": lay.filter, "torch": tcute.filter, "pycute": pycute.filter},
       _single(ANY)),
    Op("composition", {"ours": lay.composition, "torch": tcute.composition,
                       "pycute": pycute.composition}, one(make_composition)),
    Op("complement", {"ours": lay.complement, "torch": tcute.complement,
                      "pycute": pycute.complement}, one(make_complement)),
    Op("right_inverse", {"ours": lay.right_inverse, "torch": tcute.right_inverse,
                         "pycute": pycute.right_inverse}, _single(ANY)),
    Op("left_inverse", {"ours": lay.left_inverse, "torch": tcute.left_inverse,
                        "pycute": pycute.left_inverse}, _single(INJECTIVE)),
    Op("logical_divide", {"ours": lay.logical_divide, "torch": tcute.logical_divide,
                          "pycute": pycute.logical_divide}, one(make_logical_divide), swap=True),
    Op("logical_product", {"ours": lay.logical_product, "torch": tcute.logical_product,
                           "pycute": pycute.logical_product}, one(make_logical_product),
       swap=True),
    Op("zipped_divide", {"ours": lay.zipped_divide, "torch": tcute.zipped_divide,
                         "pycute": pycute.zipped_divide}, one(make_zipped_divide), swap=True),
    Op("evaluation L(i)", {"ours": Layout.__call__, "torch": tcute.Layout.__call__,
                           "pycute": pycute.Layout.__call__}, per_index(lambda A, i: (A, i))),
    Op("crd2idx", {"ours": lay.crd2idx, "torch": tcute.crd2idx, "pycute": pycute.crd2idx},
       per_index(lambda A, i: (lay.idx2crd(i, A.shape), A.shape, A.stride))),
    Op("idx2crd", {"ours": lay.idx2crd, "torch": tcute.idx2crd, "pycute": pycute.idx2crd},
       per_index(lambda A, i: (i, A.shape))),
    Op("is_injective", {"ours": lay.is_injective, "torch": enumerated_injective(tcute),
                        "pycute": enumerated_injective(pycute)}, _single(ANY)),
]

# Structured layouts far too big to list, where is_injective must answer from structure
# alone (issue 8: (2**22, 3):(2, 3) well under a second); target: each under 1 s.
LARGE_INJECTIVE: list[tuple[Layout, bool]] = [
    (Layout((2**22, 3), (2, 3)), False),
    (Layout((2**22, 3), (3, 2**23)), True),
    (Layout((1024, 1024, 1024, 1024), (1, 1 << 30, 1 << 10, 1 << 20)), True),
    (Layout((3, 2**20, 5), (2**20 * 5, 1, 2**20)), True),
    (Layout((4, 4, 2**20), (2**20 * 2 + 1, 2**20, 1)), False),
]
LARGE_TARGET_S = 1.0


def time_large_injective() -> list[str]:
    """Time is_injective on :data:`LARGE_INJECTIVE`; return the misses."""
    print(f"\nis_injective at scale (ours only: listing these would take minutes; target "
          f"< {LARGE_TARGET_S:.0f} s each)")
    misses: list[str] = []
    for L, expected in LARGE_INJECTIVE:
        clear_caches()
        t0 = time.perf_counter()
        got = lay.is_injective(L)
        dt = time.perf_counter() - t0
        print(f"  {L!s:<48} size 2**{L.size.bit_length() - 1:<3} -> {got!s:<5} "
              f"{dt * 1e3:9.3f} ms")
        if got is not expected:
            misses.append(f"is_injective({L}) returned {got}, expected {expected}")
        elif dt > LARGE_TARGET_S:
            misses.append(f"is_injective({L}) took {dt:.2f} s")
    return misses


@dataclass
class Cases:
    """The accepted cases of one op, as each library takes them, and why others were dropped."""

    args: dict[str, list[Args]] = field(default_factory=lambda: {lib: [] for lib in LIBS})
    dropped: Counter[str] = field(default_factory=Counter)
    example_mismatch: str = ""


def check(op: Op, args: Args) -> tuple[dict[str, Args], str | None]:
    """Each library's inputs, and why the case must be dropped (None: keep it)."""
    inputs = {lib: tuple(to_lib(a, lib) for a in args) for lib in LIBS}
    out: dict[str, Any] = {}
    for lib in LIBS:
        try:
            out[lib] = normalize(op.fns[lib](*inputs[lib]), lib, op.swap)
        except LayoutError:
            return inputs, "ours raises" if lib == "ours" else f"{lib} raises"
        except Exception:  # pycute signals with AssertionError, ZeroDivisionError, ...
            if lib == "ours":
                raise
            return inputs, f"{lib} raises"
    if out["torch"] != out["pycute"]:
        return inputs, "torch != pycute"
    if out["ours"] != out["torch"]:
        return inputs, "ours != both oracles"
    return inputs, None


def build_cases(op: Op, n: int, seed: int) -> Cases:
    rng = random.Random(f"{seed}/{op.name}")
    cases = Cases()
    seen: set[Args] = set()
    attempts = 0
    while len(cases.args["ours"]) < n and attempts < 200 * n:
        for args in op.make(rng):
            attempts += 1
            if args in seen or len(cases.args["ours"]) >= n:
                continue
            seen.add(args)
            inputs, why = check(op, args)
            if why is not None:
                cases.dropped[why] += 1
                if why == "ours != both oracles" and not cases.example_mismatch:
                    cases.example_mismatch = f"{op.name}{tuple(str(a) for a in args)}"
                continue
            for lib in LIBS:
                cases.args[lib].append(inputs[lib])
    return cases


# ---- timing --------------------------------------------------------------------------------
CHUNK = 10
"""Cases per timed chunk: short enough that a chunk is rarely preempted by other processes."""


def run_pass(fn: Callable[..., Any], chunks: list[list[Args]]) -> list[int]:
    """Call ``fn`` on every case; the nanoseconds each chunk of cases took."""
    clock = time.perf_counter_ns
    out: list[int] = []
    for chunk in chunks:
        t0 = clock()
        for args in chunk:
            fn(*args)
        out.append(clock() - t0)
    return out


COLUMNS = ("cold", "warm", "torch", "pycute")
RATIOS = (("cold", "torch"), ("warm", "torch"), ("cold", "pycute"), ("warm", "pycute"))


def time_op(op: Op, cases: Cases, repeat: int) -> dict[str, float]:
    """µs per call of each column over ``repeat`` rounds (one pass of each column per round).

    Each pass is timed in chunks of :data:`CHUNK` cases; a chunk's time is its median over
    the rounds, and a column's time is the sum of its chunks' medians divided by the number
    of cases.  A pass preempted by another process (a 2x jump on a loaded machine) then
    spoils one chunk of one round, which the median discards.
    """
    n = len(cases.args["ours"])
    chunks = {lib: [cs[k:k + CHUNK] for k in range(0, n, CHUNK)]
              for lib, cs in cases.args.items()}
    samples: dict[str, list[list[int]]] = {c: [] for c in COLUMNS}
    for lib in LIBS:  # one untimed pass each: adaptive-interpreter warm-up, fills our caches
        run_pass(op.fns[lib], chunks[lib])
    for r in range(repeat):
        # Rotate the order so no column always runs first; each pass starts after a full
        # collection, with the collector off while it runs.
        for column in COLUMNS[r % 4:] + COLUMNS[:r % 4]:
            lib = "ours" if column in ("cold", "warm") else column
            gc.collect()
            if column == "cold":
                clear_caches()
            gc.disable()
            try:
                samples[column].append(run_pass(op.fns[lib], chunks[lib]))
            finally:
                gc.enable()
    return {c: sum(map(statistics.median, zip(*s))) / n / 1000 for c, s in samples.items()}


# ---- report --------------------------------------------------------------------------------
def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, nvidia-cutlass (pycute) "
            f"{importlib.metadata.version('nvidia-cutlass')}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--cases", type=int, default=None, help="cases per op (default 300)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds (default 31)")
    p.add_argument("--seed", type=int, default=SEED, help=f"case seed (default {SEED})")
    p.add_argument("--smoke", action="store_true",
                   help="tiny run (CI): prints the table, fails only on errors, never on ratios")
    a = p.parse_args(argv)
    n = a.cases if a.cases is not None else (10 if a.smoke else 300)
    repeat = a.repeat if a.repeat is not None else (3 if a.smoke else 31)
    if n < 1 or repeat < 1:
        p.error("--cases and --repeat must be >= 1")

    missing = EXPECTED_CACHES - {name.rsplit(".", 1)[1] for name in CACHES}
    print(f"machine: {machine()}")
    print(f"load average before: {load()}")
    print(f"seed {a.seed}, {n} cases per op, {repeat} rounds (one pass per column each); "
          "µs per call = sum over chunks of 10 cases of the chunk's median time / cases")
    print(f"cold = these caches cleared before each pass: {', '.join(sorted(CACHES))}")
    if missing:
        print(f"note: expected caches not found (renamed?): {', '.join(sorted(missing))}")

    errors: list[str] = []
    rows: list[tuple[str, int, dict[str, float]]] = []
    notes: list[str] = []
    for op in OPS:
        cases = build_cases(op, n, a.seed)
        got = len(cases.args["ours"])
        if got < n:
            errors.append(f"{op.name}: only {got} admissible cases of {n} requested")
        if cases.dropped:
            notes.append(f"  {op.name}: kept {got}, dropped "
                         + ", ".join(f"{k}: {v}" for k, v in sorted(cases.dropped.items())))
        if cases.example_mismatch:
            notes.append(f"    e.g. {cases.example_mismatch}")
        if got:
            gc.collect()
            gc.freeze()  # keep the per-pass collections short: modules and cases are permanent
            rows.append((op.name, got, time_op(op, cases, repeat)))

    head = (f"{'op':<16} {'cases':>5} {'ours cold':>10} {'ours warm':>10} {'torch':>8} "
            f"{'pycute':>8} {'cold/torch':>11} {'warm/torch':>11} {'cold/pycute':>12} "
            f"{'warm/pycute':>12}")
    print()
    print(head)
    print("-" * len(head))
    slow: list[str] = []
    for name, got, t in rows:
        ct, wt, cp, wp = (t[a] / t[b] for a, b in RATIOS)
        flag = "  <-- slower than torch" if ct > 1.0 else ""
        if ct > 1.0:
            slow.append(f"{name} ({ct:.2f}x)")
        print(f"{name:<16} {got:>5} {t['cold']:>10.2f} {t['warm']:>10.2f} {t['torch']:>8.2f} "
              f"{t['pycute']:>8.2f} {ct:>10.2f}x {wt:>10.2f}x {cp:>11.2f}x {wp:>11.2f}x{flag}")
    errors.extend(time_large_injective())
    print(f"\nload average after: {load()}")
    if notes:
        print("\ndropped cases (a library raised, or the answers differ):")
        print("\n".join(notes))
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    if errors:
        return 2
    if slow:
        verdict = "ignored (--smoke)" if a.smoke else "FAIL"
        print(f"\n{verdict}: ours (cold) slower than torch's copy on: {', '.join(slow)}")
        return 0 if a.smoke else 1
    print("\nOK: ours (cold) <= 1.0x torch's copy on every op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
