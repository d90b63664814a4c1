"""The accountant registry: one name per accountant, the same in Opacus, TF-Privacy and the CLI."""

from __future__ import annotations

from typing import Any

from dpplugins.errors import ParameterError

__all__ = ["register", "create", "available", "get_class"]

_REGISTRY: dict[str, type] = {}


def register(name: str, cls: type) -> None:
    """Register accountant class ``cls`` under ``name`` (idempotent for the same class)."""
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ParameterError("name", name, f"a name not already taken by {existing.__name__}")
    _REGISTRY[name] = cls


def available() -> list[str]:
    """Names accepted by :func:`create`, sorted."""
    return sorted(_REGISTRY)


def get_class(name: str) -> type:
    """The class registered under ``name``."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ParameterError("accountant", name, "one of " + ", ".join(available())) from None


def create(name: str, **options: Any):
    """A new accountant by registry name, e.g. ``create("pld", eps_tolerance=1e-3)``."""
    return get_class(name)(**options)
