"""Names the last release moved keep working for this one, each with a ``DeprecationWarning``
naming its replacement (CHANGELOG.md lists them)."""

from __future__ import annotations

import pytest

import backend
import mesh
from backend import FakeBackend, NotAMemberError
from mesh import MeshView


def test_not_in_mesh_error_is_not_a_member_error() -> None:
    with pytest.warns(DeprecationWarning, match=r"backend\.NotAMemberError"):
        old = backend.NotInMeshError  # type: ignore[attr-defined]
    assert old is NotAMemberError


def test_backend_bind_binds_as_backend_bind_does() -> None:
    fb = FakeBackend(8, rank=6)
    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    with pytest.warns(DeprecationWarning, match=r"backend\.bind\(view, backend\)"):
        mesh_ = fb.bind(view, backend_override={"tp": "gloo"})  # type: ignore[attr-defined]
    assert mesh_ == backend.bind(view, fb)
    assert mesh_.get_group("tp").ranks == (4, 5, 6, 7) and mesh_.options["tp"].backend == "gloo"


def test_fake_group_family_is_its_dim_view() -> None:
    group = backend.bind(MeshView.from_shape((2, 4), ("dp", "tp")), FakeBackend(8, 6)).get_group(1)
    with pytest.warns(DeprecationWarning, match=r"FakeGroup\.dim_view"):
        assert group.family == group.dim_view  # type: ignore[attr-defined]


def test_c10d_explain_is_diagnose(monkeypatch: pytest.MonkeyPatch) -> None:
    cls = backend.C10dBackend
    seen: list[tuple[object, object]] = []
    monkeypatch.setattr(cls, "diagnose", lambda self, e, g: seen.append((e, g)) or e)
    error = RuntimeError("collective failed")
    with pytest.warns(DeprecationWarning, match=r"C10dBackend\.diagnose"):
        assert cls.explain(object.__new__(cls), error, "group") is error
    assert seen == [(error, "group")]


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NotThere"):
        backend.NotThere  # type: ignore[attr-defined]  # noqa: B018
    assert callable(mesh.render)
