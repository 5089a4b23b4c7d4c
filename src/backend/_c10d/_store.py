"""The store as the barrier uses it: its keys (namespaced per job and attempt), pooled
connections (one blocking call per connection), and the helper thread that blocks for the
main thread so a Ctrl-C acts at once."""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import re
import secrets
import signal
import socket
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ABSENT", "PREFIX", "Closed", "Helper", "Interrupts", "Lease", "job_namespace",
           "key", "lease", "process_token", "reconnected", "timed_out"]

PREFIX = "meshlayout"
ABSENT = "\x00meshlayout-absent"  # a value no key holds: a compare_set with it only reads


def key(namespace: str, *parts: object) -> str:
    """The store key of ``parts`` in ``namespace``.

    >>> key("job.0", "t", "ml-ab")
    'meshlayout/job.0/t/ml-ab'
    """
    return "/".join([PREFIX, namespace, *map(str, parts)])


def job_namespace(environ: Mapping[str, str] | None = None) -> str:
    """This job's and attempt's namespace for the keys the barrier and discovery write: the
    launcher's job id and restart count (torchelastic's ``TORCHELASTIC_RUN_ID`` and
    ``TORCHELASTIC_RESTART_COUNT``, else Slurm's ``SLURM_JOB_ID`` and
    ``SLURM_RESTART_COUNT``), so that keys an earlier job or attempt left on a store that
    outlived it (an agent's) are never read as this one's.  Without a launcher: ``job.0``,
    every such job's, so a store that outlives a job (one passed to ``init_process_group``
    by a longer-lived process) would hold the earlier job's keys: each rank claims its rank
    in the namespace when its backend is made (:meth:`~._liveness.Liveness.claim`), and a
    second job there is refused, naming the claim, before it reads any of them.  Characters
    outside ``[A-Za-z0-9_.:-]`` in the job id are replaced.

    >>> job_namespace({"TORCHELASTIC_RUN_ID": "run 7", "TORCHELASTIC_RESTART_COUNT": "2"})
    'run_7.2'
    >>> job_namespace({"SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "1"})
    '4242.1'
    >>> job_namespace({})
    'job.0'
    """
    env = os.environ if environ is None else environ
    source = "TORCHELASTIC" if env.get("TORCHELASTIC_RUN_ID") else "SLURM"
    run, restart = (("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT") if source ==
                    "TORCHELASTIC" else ("SLURM_JOB_ID", "SLURM_RESTART_COUNT"))
    job = re.sub(r"[^A-Za-z0-9_.:-]", "_", env.get(run, "") or "job")[:100]
    count = env.get(restart, "0")
    return f"{job}.{count if count.isdigit() and len(count) < 10 else 0}"


def process_token() -> str:
    """What this process writes as its claim of its rank in a namespace
    (:meth:`~._liveness.Liveness.claim`): its pid and 64 random bits, drawn again in a
    forked child, so no other process, now or earlier, writes the same.

    >>> process_token() == process_token(), process_token().startswith(f"pid {os.getpid()} ")
    (True, True)
    """
    return _TOKEN[0]


def _new_token() -> str:
    return f"pid {os.getpid()} {secrets.token_hex(8)}"


_TOKEN = [_new_token()]


def timed_out(error: BaseException) -> bool:
    """Whether a store call ended at its timeout (torch's ``DistStoreError``: "wait timeout
    after ...") rather than by a failure of the store (``DistNetworkError``: a refused or
    broken connection).

    >>> timed_out(RuntimeError("wait timeout after 50ms, keys: /o")), timed_out(
    ...     ConnectionError("Connection reset by peer"))
    (True, False)
    """
    if type(error).__name__ == "DistNetworkError":
        return False
    text = str(error).lower()
    return "timeout" in text or "timed out" in text


_POOLS: weakref.WeakKeyDictionary[Any, dict[str, list[Any]]] = weakref.WeakKeyDictionary()
_POOL_LOCK = threading.Lock()


class Lease:
    """One connection to a store, a clone of it, held by one user at a time and given back
    to the store's pool when released (or when the holder, e.g. a thread-local, is gone).

    A TCPStore connection serves one blocking call at a time, so each thread that blocks in
    the store needs one of its own; making one now and then takes 5 s on loopback, with the
    GIL held (torch 2.13's ``clone``, about 1 in 30), which stalls every thread of the
    process: connections are therefore reused, process-wide, per store, rather than made per
    thread or per backend."""

    def __init__(self, root: Any, kind: str) -> None:
        self._root = weakref.ref(root)
        self._kind = kind
        with _POOL_LOCK:
            free = _POOLS.setdefault(root, {}).setdefault(kind, [])
            conn = free.pop() if free else None
        self.conn: Any = conn if conn is not None else root.clone()

    def release(self) -> None:
        """Give the connection back (idempotent)."""
        conn, self.conn = self.conn, None
        root = self._root()
        if conn is None or root is None:
            return
        with _POOL_LOCK:
            pools = _POOLS.get(root)
            if pools is not None:
                pools.setdefault(self._kind, []).append(conn)

    def discard(self) -> None:
        """Drop the connection without giving it back: one the store's server may have
        closed (a TCPStore server drops a client whose ``add`` meets a value that is no
        number), so that nobody gets it again."""
        self.conn = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def lease(root: Any, kind: str = "barrier") -> Lease | None:
    """A :class:`Lease` on ``root``'s pool of ``kind``, or None where ``root`` cannot be
    cloned (no ``clone``, or one that raises, as torch's ``FakeStore``'s does): then its
    users share it."""
    try:
        return Lease(root, kind) if hasattr(root, "clone") else None
    except TypeError:  # a store that cannot be weakly referenced: no pool
        return None
    except RuntimeError:  # a store without clone (torch's FakeStore: a pure virtual call)
        return None



def reconnected(conn: Any) -> Any:
    """A new connection to ``conn``'s store (a clone), in place of one whose server may
    have closed it (TCPStore's drops a client whose ``add`` meets a value that is no
    number); ``conn`` itself where it cannot be cloned (then it was not closed either:
    such a store lives in this process)."""
    try:
        return conn.clone() if hasattr(conn, "clone") else conn
    except RuntimeError:  # torch's FakeStore: a pure virtual call
        return conn


class Closed:
    """The store of a closed rendezvous: every use says so."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("this backend was shut down; its store is released")



class Helper:
    """Runs the main thread's blocking store calls on a thread of its own, so that a Ctrl-C
    acts at once: the main thread waits on a lock, which a signal interrupts (a wait inside
    the store is not interrupted).  A helper keeps its connection (its thread's clone of the
    store); one still blocked in a call the main thread gave up on finishes it (the
    interrupted attempt's close wakes it), then serves again.  Idle helpers end after a
    minute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, run by a helper thread while this thread waits."""
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), daemon=True,
                             name="meshlayout-wait").start()
        done = threading.Event()
        box: list[Any] = []
        jobs.put((fn, box, done))
        done.wait()  # interrupted by a signal: the helper finishes in the background
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _serve(self, jobs: queue.SimpleQueue[Any]) -> None:
        while True:
            try:
                job = jobs.get(timeout=60.0)
            except queue.Empty:
                with self._lock:
                    if jobs in self._idle:
                        self._idle.remove(jobs)
                        return
                continue
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed to the caller
                box.append((False, e))
            done.set()
            with self._lock:
                self._idle.append(jobs)

    def stop(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for jobs in idle:
            jobs.put(None)




_SIGINT = int(signal.SIGINT)
_getsignal: Callable[[int], object] = importlib.import_module("_signal").getsignal
"""``signal.getsignal`` without ``signal.py``'s enum conversion (a barrier asks it at each
wait; the C module has no type stubs)."""


_DEFAULT_INT = signal.default_int_handler
_set_wakeup_fd = signal.set_wakeup_fd


class Interrupts:
    """Lets the main thread block in the store itself and still act on a Ctrl-C at once.

    A wait inside a TCPStore call is not interrupted by a signal (c10d retries it), so
    while the main thread waits, the C-level signal handler's wake-up fd
    (``signal.set_wakeup_fd``) is a socket this object's thread reads: on a SIGINT it runs
    the waiter's ``on_interrupt`` (which closes the round, writing the wake-up the main
    thread waits for); the main thread then returns from the store and raises the
    ``KeyboardInterrupt`` Python has pending.  Nothing runs on another thread while no
    signal comes, so the success path costs no thread switch (a helper thread blocking for
    the main thread cost two per wait).  Used only where SIGINT raises
    ``KeyboardInterrupt`` (Python's default handler) and no wake-up fd is set (an asyncio
    loop's); elsewhere :meth:`enter` says False and the caller uses a :class:`Helper`.
    """

    main: int | None = threading.main_thread().ident
    """The main thread's id, kept as a value (``threading.main_thread().ident`` costs two
    calls at each barrier wait) and set again in a child forked from any thread, which
    becomes the child's main thread (:func:`_forked`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reader: socket.socket | None = None
        self._writer: socket.socket | None = None
        self._on_interrupt: Callable[[], None] | None = None

    def _start(self) -> socket.socket:
        if self._writer is not None:  # started (never unset): no lock on a barrier's path
            return self._writer
        with self._lock:
            if self._writer is None:
                self._reader, self._writer = socket.socketpair()
                self._writer.setblocking(False)
                threading.Thread(target=self._run, args=(self._reader,), daemon=True,
                                 name="meshlayout-interrupts").start()
            return self._writer

    def enter(self, on_interrupt: Callable[[], None]) -> bool:
        """From now until :meth:`leave`, a SIGINT runs ``on_interrupt`` on this object's
        thread; whether it does (False: not the main thread, or SIGINT is handled otherwise,
        and then :meth:`leave` is not to be called).  Two methods, not a context manager: a
        barrier's wait asks this on its success path."""
        if threading.get_ident() != Interrupts.main or _getsignal(_SIGINT) is not _DEFAULT_INT:
            return False
        writer = self._writer if self._writer is not None else self._start()
        previous = _set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        if previous != -1:  # somebody else's (an event loop's): leave it alone
            _set_wakeup_fd(previous)
            return False
        self._on_interrupt = on_interrupt
        return True

    def leave(self) -> None:
        """End what a successful :meth:`enter` began."""
        self._on_interrupt = None
        _set_wakeup_fd(-1)

    def _run(self, reader: socket.socket) -> None:
        while True:
            try:
                got = reader.recv(64)
            except OSError:
                return
            act = self._on_interrupt
            if got and signal.SIGINT in got and act is not None:
                with contextlib.suppress(Exception):
                    act()


def _forked() -> None:
    Interrupts.main = threading.get_ident()  # the forking thread is the child's main thread
    _TOKEN[0] = _new_token()  # a process of its own


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)
