"""Per-dim group options, given per dim name like torch's ``backend_override``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Union

import attrs

from layout import show

from ._errors import BackendConfigError

__all__ = ["GroupOptions", "Override", "as_options", "dim_options", "normalize_overrides"]


def _check_timeout(_: object, __: object, value: timedelta | None) -> None:
    if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
        raise BackendConfigError(f"timeout must be a positive datetime.timedelta, got {value!r}")


def _check_opt_str(_: object, attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise BackendConfigError(f"{attr.name} must be a non-empty string or None, got {value!r}")


@attrs.frozen
class GroupOptions:
    """How to create the process groups of one dim.

    ``backend``: a c10d backend name (``"gloo"``, ``"nccl"``) or None for the
    default group's; ``pg_options``: backend-specific options object;
    ``timeout``: collective timeout; ``group_desc``: a description shown in
    torch's logs; ``tag``: a different tag asks for a separate communicator
    for the same ranks.  Groups are shared between views exactly when their
    ranks *and* options are equal.

    >>> GroupOptions(timeout=timedelta(seconds=30)).is_default, GroupOptions().is_default
    (False, True)
    """

    backend: str | None = attrs.field(default=None, validator=_check_opt_str)
    pg_options: Any = None
    timeout: timedelta | None = attrs.field(default=None, validator=_check_timeout)
    group_desc: str | None = attrs.field(default=None, validator=_check_opt_str)
    tag: str | None = attrs.field(default=None, validator=_check_opt_str)

    @property
    def is_default(self) -> bool:
        """Whether no option is overridden."""
        return self == _DEFAULT

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles go back through the constructor (and its checks)."""
        return GroupOptions, (self.backend, self.pg_options, self.timeout, self.group_desc,
                              self.tag)


_DEFAULT = GroupOptions()

Override = Union[str, GroupOptions, tuple[str, Any], Any]
"""One dim's override: a backend name, ``(name, pg_options)``, a pg_options object or
:class:`GroupOptions`."""


def as_options(value: Override) -> GroupOptions:
    """Normalize one override (torch's ``backend_override`` forms) to :class:`GroupOptions`."""
    if value is None:
        return _DEFAULT
    if isinstance(value, GroupOptions):
        return value
    if isinstance(value, str):
        return GroupOptions(backend=value)
    if isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[0], (str, type(None))):
            raise BackendConfigError(
                f"a tuple override must be (backend_name, pg_options), got {value!r}"
            )
        return GroupOptions(backend=value[0], pg_options=value[1])
    if isinstance(value, (bool, int, float, complex, bytes, list, dict, set, frozenset)):
        raise BackendConfigError(
            f"an override is a backend name, (backend_name, pg_options), a pg_options object or "
            f"GroupOptions; got {show(value)}")
    return GroupOptions(pg_options=value)


def normalize_overrides(names: Sequence[str], overrides: Mapping[Any, Override] | None
                        ) -> dict[str, GroupOptions]:
    """The overridden dims' options, by dim name, from a mapping keyed by dim name or index
    (torch's ``backend_override``); dims it does not name are left out.

    Refused like torch does (:class:`~backend.BackendConfigError`, a ``RuntimeError``):
    a dim named both by index and by name, and keys that are neither a dim name nor an
    index in ``[0, len(names))``.
    """
    out: dict[str, GroupOptions] = {}
    if overrides is None:
        return out
    if not isinstance(overrides, Mapping):
        raise BackendConfigError(f"backend_override must be a mapping from dims to overrides, "
                                 f"got {show(overrides)}")
    by: dict[int, Any] = {}
    invalid: list[Any] = []
    for key, value in overrides.items():
        if isinstance(key, str) and key in names:
            k = names.index(key)
        elif type(key) is int and 0 <= key < len(names):
            k = key
        else:
            invalid.append(key)
            continue
        if k in by:
            raise BackendConfigError(f"Found redundant dim index {k} and name {names[k]} in "
                                     "backend_override")
        by[k] = value
    if invalid:
        raise BackendConfigError(
            f"Found invalid keys in backend_override: got {invalid!r}, expected integers in "
            f"range [0, {len(names)}) or one of {tuple(names)!r}")
    for k, value in by.items():
        out[names[k]] = as_options(value)
    return out


def dim_options(names: Sequence[str], overrides: Mapping[Any, Override] | None
                ) -> dict[str, GroupOptions]:
    """Every dim's options: ``backend_override``'s where it names the dim, else default."""
    given = normalize_overrides(names, overrides)
    return {n: given.get(n, _DEFAULT) for n in names}
