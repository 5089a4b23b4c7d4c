"""A store in virtual time, for exact bounds in the barrier's tests.

``World`` holds one in-memory key-value store (the semantics of torch's ``HashStore``:
``add``, ``compare_set``, ``set``, and ``get``, ``multi_get`` and ``wait`` that block until
keys exist or the timeout passes, ``append``, ``check``, ``delete_key``, ``clone``,
``set_timeout``) and a clock.  Ranks are threads started with :meth:`World.spawn`; time
stands still while any of them runs (and while the test sets up, until
:meth:`World.join`), and when every one is blocked (in ``get``, ``multi_get``, ``wait`` or
:meth:`World.sleep`) it jumps to the earliest deadline among them.  So a barrier given
``clock=world.clock_for(rank)`` sees exactly the times the test planned, however loaded the
machine.

Faults, per rank: :meth:`World.signal_at` kills or interrupts a rank at a time (a blocked
call raises at once); ``kill_at(when)`` makes the rank's store calls raise
:class:`Killed` (a ``BaseException``: the barrier's handlers cannot catch it as an error,
and nothing it tries afterwards reaches the store) from the moment ``when(op, key, value,
phase)`` matches; ``interrupt_at(when)`` raises ``KeyboardInterrupt`` once: ``phase``
``"after"`` inside the call after it took effect (its result is lost, as an interrupt
landing inside a Python-level store would lose it), ``"next"`` at the rank's next store call
or clock reading (an interrupt landing right after the call returned).  Every ticket (an
``add`` on a ``/t/`` key) is logged as (rank, barrier, value) in :attr:`World.tickets`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

Trigger = Callable[[str, str, Any, str], bool]


class Killed(BaseException):
    """The rank was killed: every store call of it raises this."""


class StoreTimeout(RuntimeError):
    """A blocking call's timeout (torch raises ``DistStoreError``)."""


class _Block:
    def __init__(self, keys: list[str], deadline: float, rank: int | None) -> None:
        self.keys, self.deadline, self.ready = keys, deadline, False
        self.rank, self.signal = rank, ""


class World:
    """One store and one clock for a set of rank threads (see the module)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.start = start
        self._cv = threading.Condition()
        self._data: dict[str, bytes] = {}
        self._running = 1  # the test's own thread, until it calls join()
        self._blocked: list[_Block] = []
        self.tickets: list[tuple[int, str, int]] = []
        self.dead: set[int] = set()
        self._faults: dict[int, list[tuple[str, Trigger]]] = {}
        self._pending: set[int] = set()  # ranks with an interrupt due at their next step
        self._threads: list[threading.Thread] = []

    # ---- time and threads ----------------------------------------------------------------------
    def clock_for(self, rank: int, offset: float = 0.0) -> Callable[[], float]:
        """Rank ``rank``'s clock: the world's time plus ``offset`` (another host's clock
        counts from another origin; an interrupt due lands here too)."""

        def clock() -> float:
            self._due(rank)
            return self.now + offset

        return clock

    def at(self) -> float:
        """Seconds since the start."""
        return self.now - self.start

    def spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        with self._cv:
            self._running += 1

        def run() -> None:
            try:
                fn(*args)
            finally:
                with self._cv:
                    self._running -= 1
                    self._advance()

        t = threading.Thread(target=run, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def join(self, timeout: float = 30.0) -> None:
        """Let time run (the test's thread stops holding it) and wait for every rank."""
        with self._cv:
            self._running -= 1
            self._advance()
        for t in self._threads:
            t.join(timeout)
            assert not t.is_alive(), "a rank thread is stuck"

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` of virtual time."""
        with self._cv:
            self._block([f"\x00never/{id(object())}"], self.now + max(seconds, 0.0))

    def _block(self, keys: list[str], deadline: float, rank: int | None = None) -> bool:
        """Wait (holding the condition) until ``keys`` exist or ``deadline``; whether they do.
        A signal (:meth:`signal_at`) to ``rank`` ends the wait with its exception."""
        if all(k in self._data for k in keys):
            return True
        b = _Block(keys, deadline, rank)
        self._blocked.append(b)
        self._running -= 1
        self._advance()
        while not b.ready:
            self._cv.wait()
        if b.signal == "kill":
            raise Killed
        if b.signal == "interrupt":
            raise KeyboardInterrupt
        return all(k in self._data for k in keys)

    def signal_at(self, rank: int, seconds: float, kind: str) -> None:
        """At ``seconds`` after the start, kill (``"kill"``) or interrupt (``"interrupt"``)
        rank ``rank``: a store call it is blocked in raises at once (as a Ctrl-C acts on a
        main thread waiting on a lock); otherwise its next step does."""

        def fire() -> None:
            self.sleep(self.start + seconds - self.now)
            with self._cv:
                if kind == "kill":
                    self.dead.add(rank)
                mine = [b for b in self._blocked if b.rank == rank]
                for b in mine:
                    b.signal = kind
                    self._release(b)
                if not mine and kind == "interrupt":
                    self._pending.add(rank)
                self._cv.notify_all()

        self.spawn(fire)

    def _release(self, b: _Block) -> None:
        b.ready = True
        self._blocked.remove(b)
        self._running += 1

    def _wake(self) -> None:
        for b in [b for b in self._blocked if all(k in self._data for k in b.keys)]:
            self._release(b)
        self._cv.notify_all()

    def _advance(self) -> None:
        """Nobody runs: time jumps to the earliest deadline of the blocked."""
        if self._running > 0 or not self._blocked:
            return
        self.now = max(self.now, min(b.deadline for b in self._blocked))
        for b in [b for b in self._blocked if b.deadline <= self.now]:
            self._release(b)
        self._cv.notify_all()

    # ---- faults ----------------------------------------------------------------------------------
    def kill_at(self, rank: int, when: Trigger) -> None:
        self._faults.setdefault(rank, []).append(("kill", when))

    def interrupt_at(self, rank: int, when: Trigger) -> None:
        self._faults.setdefault(rank, []).append(("interrupt", when))

    def _due(self, rank: int) -> None:
        if rank in self.dead:
            raise Killed
        if rank in self._pending:
            self._pending.discard(rank)
            raise KeyboardInterrupt

    def _check(self, rank: int, op: str, key: str, value: Any, phase: str) -> None:
        for i, (what, when) in enumerate(self._faults.get(rank, [])):
            if not when(op, key, value, phase):
                continue
            del self._faults[rank][i]
            if what == "kill":
                self.dead.add(rank)
                raise Killed
            if phase == "next":
                self._pending.add(rank)
                return
            raise KeyboardInterrupt

    def store(self, rank: int) -> VirtualStore:
        return VirtualStore(self, rank)

    def get(self, key: str) -> bytes | None:
        with self._cv:
            return self._data.get(key)

    def keys(self) -> list[str]:
        with self._cv:
            return sorted(self._data)

    def set(self, key: str, value: str | bytes) -> None:
        with self._cv:
            self._data[key] = value.encode() if isinstance(value, str) else bytes(value)
            self._wake()

    def delete(self, key: str) -> None:
        with self._cv:
            self._data.pop(key, None)


class VirtualStore:
    """Rank ``rank``'s connection to a :class:`World`'s store."""

    def __init__(self, world: World, rank: int) -> None:
        self._w = world
        self.rank = rank
        self._timeout = 300.0

    def clone(self) -> VirtualStore:
        return VirtualStore(self._w, self.rank)

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout.total_seconds()

    def _call(self, op: str, key: str, value: Any, body: Callable[[], Any]) -> Any:
        w = self._w
        w._due(self.rank)
        w._check(self.rank, op, key, value, "before")
        with w._cv:
            out = body()
            w._wake()
        if op == "add" and "/t/" in key:
            w.tickets.append((self.rank, key.rsplit("/", 1)[1], int(out)))
        w._check(self.rank, op, key, value, "after")
        w._check(self.rank, op, key, value, "next")
        return out

    @staticmethod
    def _b(value: str | bytes) -> bytes:
        return value if isinstance(value, bytes) else value.encode()

    def add(self, key: str, amount: int) -> int:
        def body() -> int:
            value = int(self._w._data.get(key, b"0")) + amount
            self._w._data[key] = str(value).encode()
            return value

        return int(self._call("add", key, amount, body))

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        exp, new = self._b(expected), self._b(desired)

        def body() -> bytes:
            current = self._w._data.get(key)
            if (current is None and not exp) or current == exp:
                self._w._data[key] = new
                return new
            return exp if current is None else current

        out: bytes = self._call("compare_set", key, desired, body)
        return out

    def set(self, key: str, value: str | bytes) -> None:
        def body() -> None:
            self._w._data[key] = self._b(value)

        self._call("set", key, value, body)

    def append(self, key: str, value: str | bytes) -> None:
        def body() -> None:
            self._w._data[key] = self._w._data.get(key, b"") + self._b(value)

        self._call("append", key, value, body)

    def get(self, key: str) -> bytes:
        timeout = self._timeout

        def body() -> bytes:
            if not self._w._block([key], self._w.now + timeout, self.rank):
                raise StoreTimeout(f"wait timeout after {timeout} s, keys: {key}")
            return self._w._data[key]

        out: bytes = self._call("get", key, None, body)
        return out

    def multi_get(self, keys: list[str]) -> list[bytes]:
        timeout = self._timeout

        def body() -> list[bytes]:
            if not self._w._block(list(keys), self._w.now + timeout, self.rank):
                raise StoreTimeout(f"wait timeout after {timeout} s, keys: {keys}")
            return [self._w._data[k] for k in keys]

        out: list[bytes] = self._call("get", keys[0], None, body)
        return out

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        def body() -> None:
            if not self._w._block(list(keys), self._w.now + timeout.total_seconds(), self.rank):
                raise StoreTimeout(f"wait timeout, keys: {keys}")

        self._call("wait", keys[0] if keys else "", None, body)

    def check(self, keys: list[str]) -> bool:
        return bool(self._call("check", keys[0], None,
                               lambda: all(k in self._w._data for k in keys)))

    def delete_key(self, key: str) -> bool:
        return bool(self._call("delete_key", key, None,
                               lambda: self._w._data.pop(key, None) is not None))

    def num_keys(self) -> int:
        return int(self._call("num_keys", "", None, lambda: len(self._w._data)))
