"""Reading torch's flight-recorder dumps, safely: one strict reader, one frozen value per dump.

A dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` returns (a pickle) or
``_dump_fr_trace_json()`` (JSON), one file per rank, the rank in the file name's trailing
digits (as torch's own analyzer reads them: ``nccl_trace_rank_3``, ``dump_3.json``).
Checked on torch 2.13.0 and 2.15.0 (dump format ``"2.10"`` in both; Gloo on CPU, and on
2.15 the backend-agnostic ``FlightRecorderHook``, which records a group whose backend does
not record itself, NCCL's ``nccl2`` included, into one buffer per backend): a dump is a dict of
``version``, ``pg_config`` (empty for Gloo: it holds no group's members), ``pg_status`` and
``entries``, one per collective or p2p call: ``process_group`` (torch's group name and its
``group_desc``), ``collective_seq_id`` / ``p2p_seq_id``, ``profiling_name``
(``"gloo:all_reduce"``: the backend, then the op; torch 2.15's hook writes ``"nccl2:all_reduce"``
and names ``all_to_all_single`` so), ``input_sizes``, ``input_dtypes``, ``state``, ``record_id``,
``time_created_ns``.  The backend before the last ``:`` is not read: ``nccl``, ``nccl2``,
``nccl-legacy``, ``gloo`` or a plugin's name, a call is read by its op.

Dumps come from machines that may be compromised or from another job, so a pickle is read by
a machine of our own (:mod:`._unpickle`) that refuses every global: only builtin containers
and scalars load (a plain ``pickle.load`` would run any code the file names), in work and
memory bounded by :data:`MAX_DUMP_UNITS` however the file shares its values, nested at most
:data:`MAX_DUMP_DEPTH` deep.  A JSON dump's values are counted from its commas and
brackets before it is decoded (at most :data:`MAX_DUMP_UNITS`; JSON shares nothing).  A
file is read up to :data:`MAX_DUMP_BYTES`, a dump holds at most :data:`MAX_DUMP_ENTRIES`
calls, and every field is checked for its type and size before it is used, so the work per
dump is bounded by its size whatever it holds, and Ctrl-C stops it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

import attrs

from .._core import FlightRecordError, call_text, read_bounded, show
from ._unpickle import MAX_DUMP_DEPTH, MAX_DUMP_UNITS, load_builtins

__all__ = ["FORMATS", "MAX_DUMP_BYTES", "MAX_DUMP_DEPTH", "MAX_DUMP_ENTRIES", "MAX_DUMP_UNITS",
           "UNEVEN_OPS", "FlightCall", "FlightDump", "read_dump"]

MAX_DUMP_BYTES = 64 << 20
"""The largest dump read (64 MiB; torch's default ring of 2,000 calls with stack frames is
about 2 MiB)."""

MAX_DUMP_ENTRIES = 1 << 16
"""The most calls one dump may hold (``TORCH_FR_BUFFER_SIZE`` rarely passes 20,000)."""

FORMATS = ("2.10",)
"""The dump formats (their ``version`` field) this release was checked on: torch 2.13 to 2.15
write ``"2.10"``.  A newer ``2.N`` is read as these are (every field is checked, so a change
that matters is refused, naming the field), and the report notes it; an older one, or
another major format, is refused by name rather than misread."""

_MOST_DIMS = 16  # dims of one tensor shape
_MOST_TENSORS = 64  # tensors of one call
_MOST_TEXT = 256  # characters of a name, an op, a dtype


@attrs.frozen
class FlightCall:
    """One recorded call of one rank: on torch's group ``group`` (``desc`` its
    ``group_desc``), its ``seq``-th collective there (or p2p call, ``p2p``), ``op``
    (``"all_reduce"``), the input ``shapes`` and ``dtypes``, torch's ``state`` and the
    call's place in the rank's own order (``order``), when it was made (``created_ns``, 0
    when the dump does not say), the ``backend`` that recorded it (``"gloo"``, ``"nccl2"``)
    and ``where`` the program made it (its innermost frame outside torch,
    ``train.py:104 in step``; empty when the dump holds no stack: JSON dumps hold none);
    ``retired``: torch's mark that the call's work had finished (completed or failed) when the
    rank dumped, ``None`` when the dump does not say.  On Gloo a call the rank made later
    calls after, yet not retired, may have been made with ``async_op=True`` and still be in
    flight (or torch had not marked it yet)."""

    group: str
    desc: str
    seq: int
    p2p: bool
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    state: str
    order: int
    created_ns: int = 0
    backend: str = ""
    where: str = ""
    retired: bool | None = None

    def describe(self) -> str:
        """``all_reduce (4, 8) float32``: the op, the first input's shape and dtype (the
        words ``check_spmd`` uses for a call)."""
        more = (f"and {len(self.shapes) - 1} more tensors",) if len(self.shapes) > 1 else ()
        return call_text(self.op, self.shapes[:1], self.dtypes[0] if self.dtypes else "?",
                         *more)

    def signature(self) -> tuple[str, tuple[tuple[int, ...], ...] | None,
                                 tuple[str, ...] | None]:
        """What the members of a group must agree on: op, shapes, dtypes; as torch's analyzer
        (``flight_recorder/components/types.py``, ``Op.match``), not the shapes of an op
        whose members' buffers legitimately differ (:data:`UNEVEN_OPS`), and neither shapes
        nor dtypes of a ``scatter`` (only its root has inputs).

        >>> call = FlightCall("g", "mesh_ep", 1, False, "all_to_all_single", ((6,),),
        ...                   ("float32",), "scheduled", 0)
        >>> call.signature()
        ('all_to_all_single', None, ('float32',))
        """
        if self.op in UNEVEN_OPS:
            return (self.op, None, self.dtypes)
        if self.op == "scatter":
            return (self.op, None, None)
        return (self.op, self.shapes, self.dtypes)


UNEVEN_OPS = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single",
                        "reduce_scatter_v", "all_gather_v"})
"""Ops whose members' input sizes may differ (uneven splits): their shapes are not compared.
Torch 2.15's analyzer exempts ``all_to_all`` and ``all_to_all_single``
(``_UNEVEN_COLLECTIVES``; 2.13's exempts ``all_to_all`` only), the name 2.15's hook gives
``alltoall_base``; the ``_v`` ops are uneven by name."""


@attrs.frozen
class FlightDump:
    """One rank's dump: the file it came from, the rank, the format, its calls in the
    rank's order (oldest first; the recorder's ring keeps only the newest) and the members
    of each group its ``pg_config`` lists (NCCL's dumps do; Gloo's list none)."""

    path: str
    rank: int
    version: str
    calls: tuple[FlightCall, ...]
    members: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)

    @property
    def newest_ns(self) -> int:
        """When the newest call was made (0 for a dump without calls)."""
        return max((c.created_ns for c in self.calls), default=0)


def read_dump(path: str, seen: dict[Any, Any] | None = None) -> FlightDump:
    """The dump at ``path`` (pickle or JSON, at most :data:`MAX_DUMP_BYTES`), checked field
    by field; anything else raises :class:`~mesh.FlightRecordError` naming the file and
    what is wrong with it.  Equal names, shapes and dtypes are kept once, in ``seen`` (pass
    one dict for all the dumps of a job: 10,000 ranks' rings repeat the same few values)."""
    rank = _rank_of(path)
    data = read_bounded(path, "the dump", MAX_DUMP_BYTES, FlightRecordError)
    try:
        raw = _decode(data)
    except FlightRecordError as e:
        raise FlightRecordError(f"{path!r} is not a flight-recorder dump: it {e}") from None
    try:
        return _dump(path, rank, raw, {} if seen is None else seen)
    except FlightRecordError as e:
        raise FlightRecordError(f"{path!r} is not a flight-recorder dump this release "
                                f"reads: {e}") from None


def _rank_of(path: str) -> int:
    base = re.sub(r"\.(json|pkl|pickle)$", "", os.path.basename(path))
    found = re.search(r"(\d{1,9})$", base)
    if found is None:
        raise FlightRecordError(f"{path!r}: a dump's file name must end in its rank, as "
                                "torch writes them (nccl_trace_rank_3, dump_3.json)")
    return int(found.group(1))


def _decode(data: bytes) -> object:
    """The dump's data: JSON when it starts with ``{``, else a pickle of builtins."""
    try:
        if data.lstrip()[:1] == b"{":
            _check_json_values(data)
            return json.loads(data)
        return load_builtins(data)
    except FlightRecordError:
        raise
    except RecursionError:
        raise FlightRecordError("nests too deep") from None
    except Exception as e:  # truncated, corrupt, not a pickle or JSON at all
        raise FlightRecordError(f"cannot be decoded ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None


def _check_json_values(data: bytes) -> None:
    """Refuse JSON of more than :data:`MAX_DUMP_UNITS` values before decoding it: each value
    is the whole text, the first in its container or after a comma, and a key comes with
    each value of an object, so twice the commas and opening brackets bound them (counted
    at C speed; a comma inside a string only counts one too many)."""
    most = 2 * (data.count(b",") + data.count(b"[") + data.count(b"{")) + 1
    if most > MAX_DUMP_UNITS:
        raise FlightRecordError(f"may hold up to {most:,} JSON values, more than "
                                f"{MAX_DUMP_UNITS:,}: not a dump torch writes")


def _dump(path: str, rank: int, raw: object, seen: dict[Any, Any]) -> FlightDump:
    if not isinstance(raw, Mapping):
        raise FlightRecordError(f"it holds {type(raw).__name__}, not a dict")
    missing = [k for k in ("version", "entries") if k not in raw]
    if missing:
        raise FlightRecordError(f"it lacks {', '.join(map(repr, missing))} (its keys: "
                                f"{show(sorted(map(str, raw))[:12])})")
    version = raw["version"]
    if not _readable(version):
        raise FlightRecordError(f"its format is {show(version)}, and this release reads "
                                f"{', '.join(map(repr, FORMATS))} (torch 2.13 to 2.15) and "
                                "newer 2.N: read it with the meshlayout release of its torch")
    entries = raw["entries"]
    if not isinstance(entries, list) or len(entries) > MAX_DUMP_ENTRIES:
        raise FlightRecordError(f"'entries' must be a list of at most {MAX_DUMP_ENTRIES:,} "
                                f"calls, got {_kind(entries)}")
    calls = tuple(_call(e, i, seen) for i, e in enumerate(entries))
    return FlightDump(path, rank, version, tuple(sorted(calls, key=lambda c: c.order)),
                      _members(raw.get("pg_config")))


def _readable(version: object) -> bool:
    """Whether ``version`` is a known format, or a newer ``2.N`` one (read as the known)."""
    if version in FORMATS:
        return True
    found = re.fullmatch(r"2\.(\d{1,4})", version) if isinstance(version, str) else None
    return found is not None and int(found.group(1)) > max(int(f[2:]) for f in FORMATS)


def _members(config: object) -> dict[str, tuple[int, ...]]:
    """Each group's members as ``pg_config`` lists them (``"ranks": "[0, 1]"``); a group
    listed without members, or not as torch writes it, is left out (Gloo lists none)."""
    out: dict[str, tuple[int, ...]] = {}
    if not isinstance(config, Mapping) or len(config) > MAX_DUMP_ENTRIES:
        return out
    for name, entry in config.items():
        text = entry.get("ranks") if isinstance(entry, Mapping) else None
        if not (_is_text(name) and isinstance(text, str) and text.startswith("[")):
            continue
        try:
            ranks = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(ranks, list) and ranks and all(_is_count(r) for r in ranks):
            out[name] = tuple(ranks)
    return out


def _call(entry: object, i: int, seen: dict[Any, Any]) -> FlightCall:
    """One entry, checked field by field (plain loops: this runs once per recorded call, a
    million times for a large job)."""
    if type(entry) is not dict:
        raise FlightRecordError(f"entry {i} is {_kind(entry)}, not a dict")
    group = entry.get("process_group")
    if not (isinstance(group, (list, tuple)) and len(group) == 2 and _is_text(group[0]) and
            _is_text(group[1])):
        raise FlightRecordError(f"entry {i}'s process_group must be (name, desc), got "
                                f"{_kind(group)}")
    p2p = entry.get("is_p2p", False) is True
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    name = entry.get("profiling_name")
    order = entry.get("record_id")
    if not (_is_count(seq) and _is_text(name) and _is_count(order)):
        raise FlightRecordError(f"entry {i} needs an int sequence number, an int record_id "
                                f"and a profiling_name, got {_kind(seq)}, {_kind(order)}, "
                                f"{_kind(name)}")
    state, made = entry.get("state", ""), entry.get("time_created_ns")
    retired = entry.get("retired")
    keep = seen.setdefault
    backend, _, op = name.rpartition(":")
    where = _where(entry.get("frames"))
    return FlightCall(keep(group[0], group[0]), keep(group[1], group[1]), seq, p2p,
                      keep(op, op),
                      keep(shapes := _shapes(entry.get("input_sizes"), i), shapes),
                      keep(dtypes := _texts(entry.get("input_dtypes"), i), dtypes),
                      keep(state, state) if _is_text(state) else "?", order,
                      made if _is_count(made) else 0, keep(backend, backend),
                      keep(where, where), retired if type(retired) is bool else None)


def _where(frames: object) -> str:
    """``train.py:104 in step``: the innermost of a call's frames (torch lists the innermost
    first, each ``{"name", "filename", "line"}``) outside torch's own files, or ``""`` when
    there is none or they are not as torch writes them (a stack is a hint: never refused)."""
    if type(frames) is not list:
        return ""
    for frame in frames[:_MOST_FRAMES]:
        if type(frame) is not dict:
            return ""
        name, file, line = frame.get("name"), frame.get("filename"), frame.get("line")
        if not (type(file) is str and len(file) <= _MOST_PATH and _is_count(line)):
            return ""
        if _TORCH_FILE.search(file) or file.startswith("<"):
            continue
        short = file if len(file) <= _MOST_TEXT else "…" + file[-_MOST_TEXT:]
        return f"{short}:{line}" + (f" in {name}" if _is_text(name) else "")
    return ""


_MOST_FRAMES = 64  # frames of one call looked through for the program's own
_MOST_PATH = 4096
_TORCH_FILE = re.compile(r"[/\\]torch[/\\]")  # torch's files, wherever it is installed


def _shapes(sizes: object, i: int) -> tuple[tuple[int, ...], ...]:
    if sizes is None:
        return ()
    if type(sizes) is list and len(sizes) <= _MOST_TENSORS:
        out = []
        for s in sizes:
            if type(s) is not list or len(s) > _MOST_DIMS:
                break
            shape = tuple(s)
            if any(type(n) is not int or n < 0 for n in shape):
                break
            out.append(shape)
        else:
            return tuple(out)
    raise FlightRecordError(f"entry {i}'s input_sizes must be at most {_MOST_TENSORS} "
                            f"shapes of at most {_MOST_DIMS} sizes >= 0, got {_kind(sizes)}")


def _texts(items: object, i: int) -> tuple[str, ...]:
    if items is None:
        return ()
    if type(items) is list and len(items) <= _MOST_TENSORS:
        out = []
        for t in items:
            if not _is_text(t):
                break
            out.append(_DTYPES.get(t) or t.lower())
        else:
            return tuple(out)
    raise FlightRecordError(f"entry {i}'s input_dtypes must be at most {_MOST_TENSORS} "
                            f"names, got {_kind(items)}")

_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
           "Int": "int32", "Long": "int64", "Bool": "bool", "Byte": "uint8", "Char": "int8"}


def _is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value < _BIG


def _is_text(value: object) -> TypeGuard[str]:
    return type(value) is str and len(value) <= _MOST_TEXT


_BIG = 1 << 63


def _kind(value: object) -> str:
    """A short account of a value that did not fit (never its whole text)."""
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)}"
    text = show(value)
    return text if len(text) <= 60 else text[:57] + "..."
