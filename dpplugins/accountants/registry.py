"""The accountant registry: one name per accountant, the same in Opacus, TF-Privacy and the CLI.

Built-in accountants are registered lazily by module path, so ``import dpplugins.accountants``
stays cheap and each family lives in its own module.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from dpplugins.errors import ParameterError

__all__ = ["register", "unregister", "create", "available", "get_class", "supporting",
           "supporting_configurations", "describe_supporting", "registered_name"]

_REGISTRY: dict[str, type] = {}
#: registry name -> (module, class) of the built-in accountants, imported on first use
_BUILT_IN: dict[str, tuple[str, str]] = {
    "pld": ("dpplugins.accountants.pld", "PLDAccountant"),
    "fdp": ("dpplugins.accountants.fdp", "GDPAccountant"),
    "checkin": ("dpplugins.accountants.checkin", "CheckInAccountant"),
    "pnsgd": ("dpplugins.accountants.pnsgd", "PNSGDAccountant"),
    "shuffle": ("dpplugins.accountants.shuffle", "ShuffleAccountant"),
    "swap": ("dpplugins.accountants.swap", "SwapAccountant"),
    "balls_and_bins": ("dpplugins.accountants.balls_and_bins", "RandomAllocationAccountant"),
}


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def register(name: str, cls: type) -> None:
    """Register accountant class ``cls`` under ``name`` (idempotent for the same class)."""
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ParameterError("name", name, f"a name not already taken by {existing.__name__}")
    _REGISTRY[name] = cls


def unregister(name: str) -> None:
    """Remove a name added with :func:`register` (built-in names cannot be removed)."""
    if name in _BUILT_IN:
        raise ParameterError("name", name, "a name registered with register(), not a built-in")
    _REGISTRY.pop(name, None)


def registered_name(cls: type) -> str:
    """The registry name of accountant class ``cls`` (its ``name`` attribute if unregistered);
    a subclass registered under its own name is called by that name."""
    for name, registered in _REGISTRY.items():
        if registered is cls:
            return name
    return getattr(cls, "name", cls.__name__)


def available() -> list[str]:
    """Names accepted by :func:`create`, sorted."""
    built_in = {name for name, (module, _) in _BUILT_IN.items() if _module_exists(module)}
    return sorted(set(_REGISTRY) | built_in)


def get_class(name: str) -> type:
    """The class registered under ``name``."""
    if isinstance(name, str) and name not in _REGISTRY and name in _BUILT_IN:
        module, cls_name = _BUILT_IN[name]
        if _module_exists(module):
            register(name, getattr(importlib.import_module(module), cls_name))
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ParameterError("accountant", name, "one of " + ", ".join(available())) from None


def create(name: str, **options: Any):
    """A new accountant by registry name, e.g. ``create("pld", eps_tolerance=1e-3)``.  An option
    the accountant does not take is a :class:`ParameterError` naming the ones it takes."""
    cls = get_class(name)
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):   # pragma: no cover - a class without a signature
        parameters = {}
    if parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        takes = [p for p in parameters if p != "self"]
        for option in options:
            if option not in takes:
                raise ParameterError(option, options[option], f"not given: the {name!r} "
                                     f"accountant takes {', '.join(takes) or 'no options'}")
    return cls(**options)


def supporting(event) -> tuple[str, ...]:
    """Registry names of the accountants that support ``event`` with their default options
    (each accountant decides from the event: ``create(name).supports(event)``)."""
    names = []
    for name in available():
        try:
            accountant = create(name)
        except Exception:  # an accountant that cannot be built with defaults cannot be named
            continue
        try:
            if accountant.supports(event):
                names.append(name)
        except Exception:
            continue
    return tuple(names)


def supporting_configurations(event) -> tuple[tuple[str, dict], ...]:
    """``(name, options)`` of every way a registered accountant supports ``event``: its default
    options first (``options == {}``, exactly :func:`supporting`), else the first of the option
    sets the accountant class lists in ``alternative_options`` (e.g. replace-one neighbouring)
    under which it does.  Each accountant still decides from the event (``supports``).

    Example::

        >>> from dpplugins.events import FixedBatchEvent, GaussianEvent
        >>> supporting_configurations(FixedBatchEvent(1000, 10, GaussianEvent(1.0)))
        (('fdp', {'neighbouring': 'replace_one'}),)
    """
    found = []
    for name in available():
        try:
            cls = get_class(name)
        except Exception:  # pragma: no cover - available() names resolve
            continue
        for options in ({},) + tuple(getattr(cls, "alternative_options", ())):
            try:
                if cls(**options).supports(event):
                    found.append((name, dict(options)))
                    break
            except Exception:   # options this accountant cannot be built with: not a way
                continue
    return tuple(found)


def describe_supporting(event) -> str:
    """The accountants that support ``event``, for messages: names, with the options where the
    defaults do not support it (``"shuffle, fdp(neighbouring='replace_one')"``); ``""`` if none."""
    parts = []
    for name, options in supporting_configurations(event):
        settings = ", ".join(f"{key}={value!r}" for key, value in options.items())
        parts.append(f"{name}({settings})" if settings else name)
    return ", ".join(parts)
