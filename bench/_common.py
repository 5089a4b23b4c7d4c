"""Helpers shared by the benchmark scripts (run as ``python bench/<script>.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, NoReturn


def layout_caches() -> dict[str, Callable[[], None]]:
    """The ``cache_clear`` of every memoized function in the ``layout`` package, by name."""
    import importlib
    import pkgutil

    import layout

    found: dict[str, Callable[[], None]] = {}
    for info in pkgutil.iter_modules(layout.__path__):
        mod: ModuleType = importlib.import_module(f"layout.{info.name}")
        for name, obj in vars(mod).items():
            clear = getattr(obj, "cache_clear", None)
            if callable(clear) and hasattr(obj, "cache_info"):
                found[f"{mod.__name__}.{name}"] = clear
    return found


def run_child(script: str, args: Sequence[str], timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --child *args`` in a fresh interpreter; return the JSON it prints last."""
    out = subprocess.run([sys.executable, script, "--child", *args], capture_output=True,
                         text=True, timeout=timeout, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{script} --child {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def verdict(failures: Sequence[str], *, smoke: bool) -> int:
    """Print each missed target and the outcome; the exit status (a smoke run never fails
    on targets)."""
    for f in failures:
        print("MISSED:", f)
    if smoke:
        print("smoke run: targets not checked")
        return 0
    if not failures:
        print("all targets met")
    return 1 if failures else 0


def forked_worker(main: Callable[[str], None], out: str, env: Mapping[str, str]) -> NoReturn:
    """The body of a worker process a fork server made (torch already imported there): set
    ``env``, run ``main(out)``, and exit 0, or 1 after printing what it raised (never
    returning into the fork server's code)."""
    os.environ.update(env)
    code = 0
    try:
        main(out)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
