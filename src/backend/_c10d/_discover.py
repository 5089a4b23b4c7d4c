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

**The gather** (keys under ``meshlayout/topo/``; ``k`` is the round, so repeated discoveries
on one store never meet an old answer).  Ranks on one host are usually consecutive, so the
world is told as *runs*: consecutive ranks on one host, at consecutive devices, in one domain.

1. ``add(epoch, 1)``: the round is ``(value - 1) // world_size`` (every rank takes a ticket
   per discovery);
2. ``set(k/r/<rank>)`` to a 13-byte digest of its host, domain and Slurm address and its
   local rank; then ``wait`` + ``get`` of rank ``r - 1``'s: rank ``r`` starts a run unless it
   continues that one (same digest, next device);
3. a run's first rank ``append``-s its whole record (about 100 bytes) to ``k/runs``;
4. ``add(k/n, 1)``: the rank that makes it ``world_size`` reads ``k/runs`` (one record per
   run), builds the topology and ``set``-s ``k/topology`` to its ``to_dict()`` JSON (or to
   the reason it could not: two ranks on one device);
5. every rank ``wait`` + ``get``-s ``k/topology``.

Store calls per rank: 7 (rank 0, which has no neighbour, 6; a run's first rank one more;
the last to arrive two more: at most 10), whatever the world.  Bytes read per rank: the
neighbour's digest and the topology's data, which holds a run per host (about 16 bytes)
only where hosts are not regular, a run of hosts per fast domain only where domains are
not, and the host names as a Slurm host list (``node[0001-4096]``): a few hundred bytes for
a regular machine named in sequence, O(hosts + domains) at worst (O(ranks) only for ranks
dealt round-robin).  The last rank reads the runs once.  ``bench/discover_scale.py``
counts both at 131,072 ranks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import weakref
from datetime import timedelta
from typing import Any

import attrs

from layout import show, show_error
from mesh import MeshError, Topology

from .._core import BackendConfigError, BackendError, DiscoveryError, process_backend

__all__ = ["DiscoveryRecord", "collect", "discover_topology", "publish"]

PREFIX = "meshlayout/topo"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_CACHE: weakref.WeakKeyDictionary[Any, Topology] = weakref.WeakKeyDictionary()


def _text(value: object, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or "\n" in value:
        raise BackendConfigError(f"{what} must be a {'' if empty else 'non-empty '}str without "
                                 f"newlines, got {show(value)}")
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

    def _digest(self) -> str:
        """What a neighbour compares: host, domain (12 hex digits) and the local rank."""
        key = hashlib.sha256(f"{self.host}\n{self.domain}".encode()).hexdigest()[:12]
        return f"{key}:{'-' if self.local_rank is None else self.local_rank}"

    def _continues(self, prev: str) -> bool:
        """Whether this rank continues the run of the rank before it (its digest ``prev``)."""
        key, _, local = prev.partition(":")
        mine, _, me = self._digest().partition(":")
        if key != mine:
            return False
        if local == "-" or me == "-":
            return local == me
        return local.isdigit() and int(local) + 1 == int(me)

    def _line(self, rank: int) -> bytes:
        return (json.dumps([rank, self.host, self.hostname, self.local_rank, self.domain])
                + "\n").encode()


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
        import pynvml  # type: ignore[import-not-found]
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


# ---- the gather: two halves, so that a bench can run a simulated world phase by phase ----
def publish(store: Any, rank: int, world_size: int, record: DiscoveryRecord,
            timeout: float) -> int:
    """Steps 1-4 of the gather for one rank; its round."""
    k = (int(store.add(f"{PREFIX}/epoch", 1)) - 1) // world_size
    base = f"{PREFIX}/{k}"
    store.set(f"{base}/r/{rank}", record._digest())
    starts = rank == 0 or not record._continues(
        _get(store, f"{base}/r/{rank - 1}", timeout, base, world_size).decode())
    if starts:
        store.append(f"{base}/runs", record._line(rank))
    if int(store.add(f"{base}/n", 1)) == world_size:
        store.set(f"{base}/topology", _answer(bytes(store.get(f"{base}/runs")), world_size))
    return k


def collect(store: Any, k: int, world_size: int, timeout: float) -> Topology:
    """Step 5: the topology of round ``k``, or the :class:`~backend.DiscoveryError` the
    last rank to arrive found."""
    base = f"{PREFIX}/{k}"
    answer = json.loads(_get(store, f"{base}/topology", timeout, base, world_size))
    if "error" in answer:
        raise DiscoveryError(f"the ranks' records do not make one machine: {answer['error']}")
    return Topology.from_dict(answer["topology"])


def _get(store: Any, key: str, timeout: float, base: str, world_size: int) -> bytes:
    try:
        store.wait([key], timedelta(seconds=timeout))
    except Exception as e:  # torch's DistStoreError (a RuntimeError) on a timeout
        try:
            came = f"{int(store.add(f'{base}/n', 0)):,} of {world_size:,} ranks had arrived"
        except Exception:
            came = "the store does not answer (its host, rank 0, left?)"
        raise DiscoveryError(
            f"discovering the machine did not complete within {timeout:g} s: {came}; every "
            "rank of the world must call discover_topology (or bind with expect_intra_*) "
            f"the same number of times ({type(e).__name__}: {e})") from None
    return bytes(store.get(key))


def _answer(runs: bytes, world_size: int) -> bytes:
    """The last rank's work: the topology of the runs, or the reason there is none."""
    try:
        data = machine_data([json.loads(line) for line in runs.splitlines() if line],
                            world_size)
        answer: dict[str, Any] = {"topology": Topology.from_dict(data).to_dict()}
    except (MeshError, DiscoveryError) as e:
        answer = {"error": show_error(e).split(": ", 1)[-1]}
    return json.dumps(answer).encode()


def machine_data(records: list[list[Any]], world_size: int) -> dict[str, Any]:
    """The data of ``Topology.to_dict`` from the first record of every run (``[rank, host,
    hostname, local_rank, domain]``, any order): runs of ranks per host (a device unknown
    goes on from the host's last), one domain per host (its own where none is known); a
    hostname that two hosts share is told apart by their identities."""
    records = sorted(records)
    hosts: dict[str, int] = {}
    names: list[str] = []
    taken: dict[str, str] = {}
    next_device: list[int] = []
    domains: list[str] = []
    runs = []
    for i, (rank, host, hostname, local, domain) in enumerate(records):
        end = records[i + 1][0] if i + 1 < len(records) else world_size
        h = hosts.get(host)
        if h is None:
            h = hosts[host] = len(names)
            shared = taken.setdefault(hostname, host) != host
            names.append(f"{hostname}#{host[:6]}" if shared else hostname)
            next_device.append(0)
            domains.append(domain or f"host:{host}")
        elif (domain or f"host:{host}") != domains[h]:
            raise DiscoveryError(f"host {names[h]!r} reports two fast domains: "
                                 f"{domains[h]!r} and {domain!r}")
        first = next_device[h] if local is None else local
        runs.append([h, end - rank, first])
        next_device[h] = first + end - rank
    number: dict[str, int] = {}
    return {"version": 1, "world": world_size, "devices_per_host": None, "ranks": runs,
            "hosts_per_domain": None, "hosts": names,
            "domains": [[number.setdefault(d, len(number)), 1] for d in domains]}


# ---- on request, or at bind time -----------------------------------------------------------------
def discover_topology(backend: Any = None, *, record: DiscoveryRecord | None = None,
                      timeout: timedelta | float | None = None) -> Topology:
    """The job's machine as a :class:`mesh.Topology`: every rank's host, device and fast
    domain, gathered through torch's default store (see the module's docs: at most 10 store
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
    try:
        k = publish(store, b.rank, b.world_size, mine, seconds)
        found = collect(store, k, b.world_size, seconds)
    except (BackendError, MeshError):
        raise
    except RuntimeError as e:  # a store that cannot gather (torch's FakeStore), or one lost
        raise DiscoveryError(
            f"discovering the machine needs the store the ranks share, and torch's default "
            f"store failed ({type(e).__name__}: {str(e)[:200]}); a fake world (torch's "
            "FakeStore) has none: give bind a topology= (a mesh.Topology)") from None
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
        own = getattr(backend, "_timeout", None)
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
