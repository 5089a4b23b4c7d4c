"""Per-dim group options, given per dim name like torch's ``backend_override``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Union

import attrs

from ._errors import BackendConfigError

__all__ = ["GroupOptions", "Override", "normalize_overrides"]


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
        if len(value) != 2 or not isinstance(value[0], str):
            raise BackendConfigError(
                f"a tuple override must be (backend_name, pg_options), got {value!r}"
            )
        return GroupOptions(backend=value[0], pg_options=value[1])
    return GroupOptions(pg_options=value)


def normalize_overrides(names: Sequence[str], overrides: Mapping[Any, Override] | None
                        ) -> tuple[GroupOptions, ...]:
    """Per-dim options, aligned with ``names``, from a mapping keyed by dim name or index."""
    out = [_DEFAULT] * len(names)
    for key, value in (overrides or {}).items():
        if isinstance(key, str):
            if key not in names:
                raise BackendConfigError(f"backend_override names unknown dim {key!r}; the dims "
                                         f"are {tuple(names)!r}")
            k = names.index(key)
        elif isinstance(key, int) and not isinstance(key, bool) and -len(names) <= key < len(names):
            k = key % len(names)
        else:
            raise BackendConfigError(f"backend_override key {key!r} is neither a dim name nor a "
                                     f"dim index of {tuple(names)!r}")
        out[k] = as_options(value)
    return tuple(out)
