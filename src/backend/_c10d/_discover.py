"""Discovering the job's machine: every rank's host, device and fast domain, gathered through
the default store into a :class:`mesh.Topology`, the value the offline tools take.

**A rank's record** (:class:`DiscoveryRecord`): its host's identity (a hash of the hostname
and ``/proc/sys/kernel/random/boot_id``, so two containers named alike on two machines
differ and one machine after a reboot is new), the hostname (the host's label), its local
rank (``LOCAL_RANK``, else ``SLURM_LOCALID``: its device on the host), ``SLURM_TOPOLOGY_ADDR``
and the NVLink domain from NVML (``clusterUuid`` and ``cliqueId`` of the GPU's fabric; read
only when ``pynvml`` is installed and the GPU reports a completed fabric, so absent on CPU;
nothing else is imported to find it).  A host's fast domain is its NVLink domain, else its
Slurm block (``SLURM_TOPOLOGY_ADDR_PATTERN`` starting with ``block``, as the topology/block
plugin of GB200 clusters sets it), else the host alone.

**The gather** (``_gather``, whose docstring states the steps, their cost and the threat
model; the records it writes: ``_discovery_record``).  Ranks on one host are usually
consecutive, so the world is told as *runs*: consecutive ranks on one host, at consecutive
devices, in one domain; a run's first rank writes its whole record, every other rank only a
33-byte digest its neighbour compares.  The last rank to arrive builds the machine
(``Topology.from_runs``); every rank checks it against its own record and its neighbour's,
and the verdict counts every rank's check, before all adopt it: the same machine, or the
same :class:`~backend.DiscoveryError` naming the rank or key at fault (a rank that did not
check, the key or line that was planted).  A value planted in the store before the call can
fail it, never pass it with a rank absent or unchecked (``_gather``'s threat model).
Store calls per rank: 10 to 15, whatever the world; bytes read: a digest, the topology's
compact data (a run per host only where hosts are not regular, the host names as a Slurm
host list) and the verdict.  ``bench/discover_scale.py`` counts both at 131,072 ranks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

from layout import show
from mesh import MeshError, Topology

from .._core import BackendConfigError, BackendError, DiscoveryError, process_backend
from ._discovery_record import Digest, RunLine
from ._gather import Gather, namespace
from ._store import lease

__all__ = ["DiscoveryRecord", "discover_topology", "gather"]



class _Calls:
    """This process's discovery calls, counted as each starts: the call's part of the keys
    (every rank calls in the same order, so the n-th calls of all ranks meet)."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    @property
    def upcoming(self) -> int:
        """The number the next call will take."""
        return self._next

    def take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next - 1


_CALLS = _Calls()
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_MOST_TEXT = 255  # a hostname (DNS allows 253), a domain or Slurm address
_CACHE: weakref.WeakKeyDictionary[Any, Topology] = weakref.WeakKeyDictionary()


def _text(value: object, what: str, *, empty: bool = False) -> str:
    """``value``, a str of at most :data:`_MOST_TEXT` characters without newlines (what the
    records' readers take: a longer one would fail every rank, naming nobody)."""
    if not isinstance(value, str) or (not value and not empty) or "\n" in value or \
            len(value) > _MOST_TEXT:
        raise BackendConfigError(f"{what} must be a {'' if empty else 'non-empty '}str of at "
                                 f"most {_MOST_TEXT} characters without newlines, got "
                                 f"{show(value)}" + (f" ({len(value):,} characters)"
                                                     if isinstance(value, str) else ""))
    return str(value)


def _optional(value: object, what: str) -> str | None:
    return None if value is None else _text(value, what)


def _host(value: object) -> str:
    return _text(value, "host")


def _hostname(value: object) -> str:
    return _text(value, "hostname")


def _slurm_addr(value: object) -> str | None:
    return _optional(value, "slurm_topology_addr")


def _slurm_pattern(value: object) -> str | None:
    return _optional(value, "slurm_topology_pattern")


def _nvlink(value: object) -> str | None:
    return _optional(value, "nvlink_domain")


def _local(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < 1 << 62:
        raise BackendConfigError(f"local_rank must be None or an int >= 0, got {show(value)}")
    return value


@attrs.frozen
class DiscoveryRecord:
    """What one rank knows of where it runs (see the module's docs): :meth:`read` reads this
    process's; :meth:`of` makes one (a test pretending to run on other hosts, a launcher
    that knows better).

    >>> r = DiscoveryRecord.of("node007", local_rank=3, nvlink_domain="c0ffee/1")
    >>> r.hostname, r.local_rank, r.domain
    ('node007', 3, 'nvlink:c0ffee/1')
    """

    host: str = attrs.field(converter=_host)
    """The host's identity: a hash of the hostname and its boot id."""
    hostname: str = attrs.field(converter=_hostname)
    local_rank: int | None = attrs.field(converter=_local)
    slurm_topology_addr: str | None = attrs.field(converter=_slurm_addr)
    slurm_topology_pattern: str | None = attrs.field(converter=_slurm_pattern)
    nvlink_domain: str | None = attrs.field(converter=_nvlink)
    """``"<clusterUuid hex>/<cliqueId>"`` from NVML, or None."""

    @classmethod
    def of(cls, hostname: str, *, boot_id: str = "", local_rank: int | None = None,
           slurm_topology_addr: str | None = None, slurm_topology_pattern: str | None = None,
           nvlink_domain: str | None = None) -> DiscoveryRecord:
        """A record for ``hostname`` (with ``boot_id``, the host's identity)."""
        name = _text(hostname, "hostname")
        return cls(_identity(name, _text(boot_id, "boot_id", empty=True)), name, local_rank,
                   slurm_topology_addr, slurm_topology_pattern, nvlink_domain)

    @classmethod
    def read(cls) -> DiscoveryRecord:
        """This process's record: the hostname and boot id, ``LOCAL_RANK`` (else
        ``SLURM_LOCALID``), ``SLURM_TOPOLOGY_ADDR`` and its pattern, and the GPU's NVLink
        domain when ``pynvml`` is installed and NVML reports one (skipped cleanly
        otherwise)."""
        local = _env_int("LOCAL_RANK")
        if local is None:
            local = _env_int("SLURM_LOCALID")
        return cls.of(socket.gethostname() or "localhost", boot_id=_boot_id(), local_rank=local,
                      slurm_topology_addr=os.environ.get("SLURM_TOPOLOGY_ADDR") or None,
                      slurm_topology_pattern=os.environ.get("SLURM_TOPOLOGY_ADDR_PATTERN")
                      or None, nvlink_domain=nvlink_domain(local or 0))

    @property
    def domain(self) -> str | None:
        """The fast domain: the NVLink domain, else the Slurm block (topology/block), else
        None (the host alone)."""
        if self.nvlink_domain is not None:
            return f"nvlink:{self.nvlink_domain}"
        addr, pattern = self.slurm_topology_addr, self.slurm_topology_pattern
        if addr and pattern and pattern.split(".")[0] == "block" and "." in addr:
            return f"slurm:{addr.split('.')[0]}"
        return None

    def digest(self) -> Digest:
        """What a neighbour compares, and what this rank checks the answer against: its
        host's and its fast domain's hashes (the host alone where it knows none), and its
        local rank."""
        return Digest(_hash(self.host), _hash(self.domain or f"host:{self.host}"),
                      self.local_rank)

    def run_line(self, rank: int) -> RunLine:
        """The whole record, written by the rank that starts a run of ranks."""
        return RunLine(rank, self.host, self.hostname, self.local_rank, self.domain)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _identity(hostname: str, boot_id: str) -> str:
    return hashlib.sha256(f"{hostname}\n{boot_id}".encode()).hexdigest()[:16]


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 18 else None


def _boot_id() -> str:
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read(64).strip()
    except (OSError, ValueError):  # not Linux, or no procfs
        return ""


def nvlink_domain(local_rank: int) -> str | None:
    """The NVLink domain of the GPU this rank uses, ``"<clusterUuid>/<cliqueId>"``, from
    NVML's fabric info; None when ``pynvml`` is not installed, NVML does not load (no
    driver: CPU machines), the GPU has no fabric, or it is not yet registered."""
    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        import pynvml  # type: ignore[import-not-found]  # optional, untyped, often absent
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = _device(pynvml, local_rank)
        info = pynvml.nvmlDeviceGetGpuFabricInfo(handle)
        completed = getattr(pynvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
        uuid = bytes(bytearray(info.clusterUuid))
        if info.state != completed or info.status != 0 or not any(uuid):
            return None
        return f"{uuid.hex()}/{int(info.cliqueId)}"
    except Exception:  # NVML_ERROR_NOT_SUPPORTED on GPUs without a fabric, and the like
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _device(pynvml: Any, local_rank: int) -> Any:
    """The NVML handle of the GPU ``local_rank`` sees as its device (``CUDA_VISIBLE_DEVICES``
    maps it to an index or a UUID)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    if local_rank < len(visible):
        which = visible[local_rank]
        if which.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(which))
        return pynvml.nvmlDeviceGetHandleByUUID(which)
    return pynvml.nvmlDeviceGetHandleByIndex(local_rank)


# ---- the gather (``_gather``) --------------------------------------------------------------------
def gather(store: Any, rank: int, world_size: int, record: DiscoveryRecord, timeout: float,
           call: int, *, clock: Callable[[], float] = time.monotonic) -> Gather:
    """Rank ``rank``'s part in this process's ``call``-th discovery (not yet run; ``clock``:
    a test's virtual one)."""
    return Gather(store, rank, world_size, record.digest(), record.run_line(rank),
                  record.hostname, timeout, namespace(call), clock=clock)


# ---- on request, or at bind time -----------------------------------------------------------------
def discover_topology(backend: Any = None, *, record: DiscoveryRecord | None = None,
                      timeout: timedelta | float | None = None) -> Topology:
    """The job's machine as a :class:`mesh.Topology`: every rank's host, device and fast
    domain, gathered through torch's default store (see the module's docs: at most 15 store
    calls per rank, whatever the world).  Collective: every rank of the world calls it (``bind``
    with ``expect_intra_*`` does), in the same order as its other discoveries.

    ``backend`` (default: the process's, over torch's default group) must be a Gloo, NCCL
    or other c10d backend whose ranks meet in the store; a ``FakeBackend`` has none (give
    ``bind`` a ``topology=`` instead).  ``record`` replaces this rank's
    :meth:`DiscoveryRecord.read` (a test pretending to run on several hosts); without it the
    answer is kept for the backend, so later calls cost nothing.  ``timeout`` (seconds or a
    ``timedelta``; default the backend's, else torch's default group timeout) bounds each
    wait; a rank that does not come fails every waiting rank with
    :class:`~backend.DiscoveryError`, as do records that make no machine (two ranks on
    one device).
    """
    b = process_backend("cpu") if backend is None else backend
    if not _meets(b):
        raise BackendConfigError(
            f"discover_topology needs a backend whose ranks meet in torch's store (Gloo, NCCL, "
            f"a C10dBackend), got {show(b)}; without one, give bind a topology= (a "
            "mesh.Topology, e.g. Topology.from_dict of a saved one)")
    if record is not None and not isinstance(record, DiscoveryRecord):
        raise BackendConfigError(f"record must be a backend.DiscoveryRecord or None, got "
                                 f"{show(record)}")
    seconds = _seconds(timeout, b)
    if record is None and b in _CACHE:
        return _CACHE[b]
    from ._torch_private import get_default_store

    store = get_default_store()
    mine = DiscoveryRecord.read() if record is None else record
    call = _CALLS.take()  # counted before anything can fail: a failed call uses up its round
    held, done = lease(store), False  # never the default store's own connection: a planted
    try:  # counter's add closes the one it runs on (TCPStore), and torch still needs that one
        found = gather(store if held is None else held.conn, b.rank, b.world_size, mine,
                       seconds, call).run()
        done = True
    except (BackendError, MeshError):
        raise
    except RuntimeError as e:  # a store that cannot gather (torch's FakeStore), or one lost
        raise DiscoveryError(
            f"discovering the machine needs the store the ranks share, and torch's default "
            f"store failed ({type(e).__name__}: {str(e)[:200]}); a fake world (torch's "
            "FakeStore) has none: give bind a topology= (a mesh.Topology)") from None
    finally:
        if held is not None and done:
            held.release()
        elif held is not None:  # a failed call's connection may be closed: not reused
            held.discard()
    if record is None:
        _CACHE[b] = found
    return found


def _meets(backend: object) -> bool:
    """Whether ``backend`` is a c10d backend whose ranks meet in the store (checked without
    loading torch for anything else: a FakeBackend is refused torch-free)."""
    if getattr(type(backend), "meets", None) is not True:
        return False
    from ._backends import C10dBackend  # torch is loaded already: the backend is one of its

    return isinstance(backend, C10dBackend)


def _seconds(timeout: object, backend: Any) -> float:
    if timeout is None:
        own = getattr(backend, "default_timeout", None)  # a C10dBackend's (_meets checked it)
        if own is not None:
            return float(own.total_seconds())
        import torch.distributed as dist

        return float(dist.distributed_c10d.default_pg_timeout.total_seconds())
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not 0 < timeout < 1e9:
        raise BackendConfigError(f"timeout must be a positive number of seconds or a "
                                 f"datetime.timedelta, got {show(timeout)}")
    return float(timeout)
