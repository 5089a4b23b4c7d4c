"""Reading a hostile flight-recorder dump is bounded (issue 44, item 6): a pickle that shares
a value with itself, nests deep, names a key no dump has, or is 64 MiB of empty containers,
and JSON of too many values, is refused with a :class:`mesh.FlightRecordError` naming the
limit, in seconds and bounded memory, and Ctrl-C stops the command while it reads.  The
machine that reads them reads every pickle of builtins as :mod:`pickle` does."""

from __future__ import annotations

import math
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hang_synth import dump, step, write
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mesh import FlightRecordError, MeshView, read_flight_records
from mesh._hang._records import MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_UNITS
from mesh._hang._unpickle import load_builtins

ROOT = Path(__file__).resolve().parents[1]  # children run here: PYTHONPATH=src finds this src
VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))
_MEMO = 0  # the first memo slot our hand-made values use (they number theirs in order)


def _text(value: str) -> bytes:
    """``value`` as a protocol-2 opcode (BINUNICODE, not memoized)."""
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _dict(items: list[tuple[bytes, bytes]]) -> bytes:
    """A whole protocol-2 pickle of a dict of the (key, value) opcodes given."""
    return b"\x80\x02}(" + b"".join(k + v for k, v in items) + b"u."


def _dump_with(key: bytes, value: bytes) -> bytes:
    """A valid empty dump plus one more item (key and value as opcodes)."""
    return _dict([(_text("version"), _text("2.10")), (_text("entries"), b"]"), (key, value)])


def _shared(depth: int, kind: str) -> bytes:
    """A ``kind`` ("tuple" or "list") holding the one before it twice, ``depth`` times over:
    a few bytes per level, 2**depth values when walked.  Each level is memoized and popped;
    the last is fetched."""
    out = (b")" if kind == "tuple" else b"]") + b"q" + bytes([_MEMO]) + b"0"
    for i in range(depth):
        get = b"h" + bytes([_MEMO + i])
        out += (get + get + b"\x86" if kind == "tuple" else b"(" + get + get + b"l") + \
            b"q" + bytes([_MEMO + i + 1]) + b"0"
    return out + b"h" + bytes([_MEMO + depth])


def _nested(depth: int) -> bytes:
    """A list inside a list ... ``depth`` lists, as opcodes."""
    return b"]" * depth + b"a" * (depth - 1)


def _refusal(tmp_path: Path, data: bytes, name: str = "fr_trace_rank_0") -> tuple[str, float]:
    """The words of the refusal of the dump ``data`` and the seconds it took."""
    path = tmp_path / name
    path.write_bytes(data)
    start = time.monotonic()
    with pytest.raises(FlightRecordError) as e:
        read_flight_records([str(path)], VIEW)
    return str(e.value), time.monotonic() - start


@pytest.mark.parametrize("depth", [28, 32, 48])
@pytest.mark.parametrize("kind", ["tuple key", "list value"])
def test_a_value_shared_with_itself_is_refused_at_once_naming_the_limit(
        tmp_path: Path, depth: int, kind: str) -> None:
    """A 374-byte dump used to take seconds at depth 28, minutes at 32, forever at 48."""
    shape = _shared(depth, kind.split()[0])
    data = _dump_with(shape, b"K\x01") if kind == "tuple key" else \
        _dump_with(_text("pg_status"), shape)
    assert len(data) < 500
    words, took = _refusal(tmp_path, data)
    assert f"more than {MAX_DUMP_UNITS:,} units of work" in words
    assert "not a dump torch writes" in words
    assert took < 5.0  # a few hundred opcodes: milliseconds, seconds of slack


@pytest.mark.parametrize(("depth", "refused"), [(MAX_DUMP_DEPTH, False),
                                                (MAX_DUMP_DEPTH + 1, True)])
def test_containers_nested_deeper_than_the_limit_are_refused(tmp_path: Path, depth: int,
                                                            refused: bool) -> None:
    """The top dict is one level: ``pg_status`` may nest ``MAX_DUMP_DEPTH - 1`` more."""
    data = _dump_with(_text("pg_status"), _nested(depth - 1))
    if refused:
        assert f"nests containers more than {MAX_DUMP_DEPTH} deep" in _refusal(tmp_path, data)[0]
    else:
        path = tmp_path / "fr_trace_rank_0"
        path.write_bytes(data)
        assert read_flight_records([str(path)], VIEW).dumped == (0,)


@pytest.mark.parametrize(("key", "kind"), [
    (_shared(3, "tuple"), "tuple"),
    (b"\x8a\x09" + b"\xff" * 8 + b"\x7f", "int"),  # LONG1: 2**71 - 1, hashed anew at each use
    (b"(K\x01\x91", "frozenset"),
])
def test_a_key_that_is_no_name_or_small_number_is_refused(tmp_path: Path, key: bytes,
                                                          kind: str) -> None:
    words = _refusal(tmp_path, _dump_with(key, b"K\x01"))[0]
    assert f"has a dict key or set item of type {kind}" in words


def test_a_string_shared_millions_of_times_is_read_without_copying_it(tmp_path: Path) -> None:
    """8 MB: a 1 MB string, then 3.5 million references to it (2 bytes each) in a field the
    reader ignores.  Each reference is one unit: read, in bounded time and memory."""
    refs = 3_500_000
    body = _text("x" * (1 << 20)) + b"q" + bytes([_MEMO]) + b"0(" + \
        (b"h" + bytes([_MEMO])) * refs + b"l"
    data = _dump_with(_text("pg_status"), body)
    assert refs + 100 < MAX_DUMP_UNITS and len(data) > 8_000_000
    path = tmp_path / "fr_trace_rank_0"
    path.write_bytes(data)
    peak_mib, took, out = _measured(path)
    assert out == "read", out
    assert peak_mib < 256 and took < 60.0, (peak_mib, took)  # the old reader: > 60 s


def test_a_shared_string_in_a_key_is_refused_before_it_is_spelt_out(tmp_path: Path) -> None:
    """A tuple key of a 10 KB string 10,000 times used to be spelt out (100 MB) to name the
    dump's keys; 8 MB of it ended in a MemoryError."""
    key = _text("x" * 10_000) + b"q" + bytes([_MEMO]) + b"0(" + \
        (b"h" + bytes([_MEMO])) * 10_000 + b"t"
    words, took = _refusal(tmp_path, _dict([(_text("entries"), b"]"), (key, b"K\x01")]))
    assert "has a dict key or set item of type tuple" in words and took < 5.0


@pytest.mark.parametrize("as_json", [False, True])
def test_64_mib_of_empty_lists_is_refused_in_bounded_memory(tmp_path: Path,
                                                            as_json: bool) -> None:
    """Each empty list a byte (pickle) or three (JSON): the old reader needed > 3 GiB."""
    size = MAX_DUMP_BYTES - 64
    path = tmp_path / ("fr_json_0.json" if as_json else "fr_trace_rank_0")
    if as_json:
        head = b'{"version": "2.10", "entries": [], "pg_status": ['
        path.write_bytes(head + b"[]," * ((size - len(head)) // 3) + b"[]]}")
    else:
        path.write_bytes(b"\x80\x02(" + b"]" * size + b"l.")
    peak_mib, took, out = _measured(path)
    words = "JSON values, more than" if as_json else f"more than {MAX_DUMP_UNITS:,} units"
    assert words in out, out
    assert peak_mib < 768, peak_mib  # the file, its copy, 4 million lists at most
    assert took < 120.0, took  # about 5 s on a busy laptop


_READ = textwrap.dedent("""
    import resource, sys, time
    from mesh import FlightRecordError, MeshView, read_flight_records
    start = time.monotonic()
    try:
        read_flight_records([sys.argv[1]], MeshView.from_shape((2, 4), ("dp", "tp")))
        out = "read"
    except FlightRecordError as e:
        out = str(e)
    took = time.monotonic() - start
    try:  # this process's own peak (ru_maxrss keeps the parent's across exec: a big pytest)
        with open("/proc/self/status") as f:
            peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(peak, took, out, sep="\\n")
""")


def _measured(path: Path) -> tuple[float, float, str]:
    """Reading ``path`` in a fresh process: its peak memory (MiB), seconds, and "read" or
    the refusal's words."""
    run = subprocess.run([sys.executable, "-c", _READ, str(path)], capture_output=True,
                         cwd=ROOT, text=True, timeout=600, check=True)
    peak, took, out = run.stdout.split("\n", 2)
    return float(peak), float(took), out.strip()


def test_ctrl_c_stops_the_command_while_it_reads_a_dump(tmp_path: Path) -> None:
    """A fifth of a second into reading a dump of 4 million opcodes (seconds), a SIGINT:
    the command says it was interrupted and exits 130, where it would otherwise end in the
    units refusal (status 2)."""
    path = tmp_path / "fr_trace_rank_0"
    path.write_bytes(b"\x80\x02(" + b"N" * (MAX_DUMP_UNITS + 10) + b"l.")
    script = ("import signal, sys\n"  # Ctrl-C as a terminal gives it (an ignored SIGINT in a
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # parent carries)
              "from mesh._cli import main\nprint('ready', flush=True)\n"
              "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", script, "hang", str(path), "--dims",
                             "dp=2,tp=4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(0.2)  # the read takes seconds: the signal comes while it runs
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "meshlayout hang: interrupted\n", err


def test_a_list_filled_after_it_was_shared_is_refused(tmp_path: Path) -> None:
    """Growing a list after using it would make the counted sizes stale: a forged pickle."""
    grow = b"]q" + bytes([_MEMO]) + b"0]h" + bytes([_MEMO]) + b"a" + b"h" + bytes([_MEMO]) + \
        b"Na" + b"\x86"
    assert "fills a list after using it" in _refusal(tmp_path, _dump_with(_text("pg_status"),
                                                                          grow))[0]


_SCALARS = (st.none() | st.booleans() | st.integers() | st.text(max_size=20) |
            st.binary(max_size=20) | st.floats(allow_nan=False))
_KEYS = st.text(max_size=10) | st.integers(-(1 << 63), (1 << 63) - 1)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=6) |
                       st.tuples(inner, inner) | st.tuples(inner) |
                       st.dictionaries(_KEYS, inner, max_size=6) |
                       st.frozensets(_KEYS, max_size=4), max_leaves=40)


@settings(max_examples=200, deadline=None)
@given(value=_VALUES, protocol=st.integers(2, 5), shared=st.booleans())
@example(value=b"", protocol=2, shared=False)  # protocol 2 writes b"" as the global bytes
def test_every_pickle_of_builtins_reads_as_pickle_reads_it(value: object, protocol: int,
                                                           shared: bool) -> None:
    """Law: for a value of builtin containers and scalars (dict keys names and 64-bit
    numbers), nested within the limit, the machine reads the pickle ``pickle`` wrote,
    at every protocol from 2 (torch's), as ``pickle.loads`` does, a value used twice
    included (protocols 2 and 3 write frozensets, and 2 bytes, through globals:
    ``_codecs.encode``, or ``bytes`` for ``b''``; refused there, as every global is)."""
    whole = [value, value] if shared else value
    data = pickle.dumps(whole, protocol=protocol)
    try:
        got = load_builtins(data)
    except FlightRecordError as e:
        assert protocol < 4 and str(e).startswith("names the object ") and \
            str(e).endswith(".frozenset" if protocol == 3 else (".frozenset", "_codecs.encode",
                                                                ".bytes")), e
        return
    assert _same(got, pickle.loads(data))


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (``1 == 1.0 == True`` is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    return bool(a == b)


def test_torchs_full_ring_with_stacks_is_read(tmp_path: Path) -> None:
    """Torch's default ring, 2,000 calls with 20-frame stacks (1.9 MB pickled), is within
    the units: read as ``pickle`` reads it, and reported."""
    full = dump(VIEW, 0, step(1000))
    for i, entry in enumerate(full["entries"]):
        entry["frames"] = [{"name": f"f{k}", "filename": f"/src/m{k}.py", "line": i + k}
                           for k in range(20)]
    paths = write(tmp_path, {0: full})
    assert load_builtins(Path(paths[0]).read_bytes()) == full
    assert read_flight_records(paths, VIEW).dumped == (0,)
