"""Values the recovery wing makes itself: a caller never constructs one.

:class:`Made` refuses a direct call (so no unchecked value exists) and builds its
subclasses with :meth:`Made._trusted` from fields the wing has already checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .._core import MeshTypeError

__all__ = ["Made"]

_T = TypeVar("_T", bound="Made")


class Made:
    """A value made by one function of the recovery wing, named by :attr:`MADE_BY`."""

    __slots__ = ()

    MADE_BY: ClassVar[str] = "the recovery wing"
    """The call that makes this kind of value, for the refusal's message."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise MeshTypeError(f"{type(self).__name__} values are made by {self.MADE_BY}, not "
                            "constructed")

    if TYPE_CHECKING:
        def __attrs_init__(self, *fields: Any) -> None:
            """attrs' initializer of each subclass (``attrs.frozen(init=False)``)."""

    @classmethod
    def _trusted(cls: type[_T], *fields: Any) -> _T:
        """A value from fields already known valid (no checks)."""
        made = cls.__new__(cls)
        made.__attrs_init__(*fields)
        return made
