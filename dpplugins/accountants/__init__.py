"""Accountants and their registry.

``create(name, **options)`` builds one by registry name; ``available()`` lists the names.  Names
are the same everywhere (our registry, Opacus after ``dpplugins.integrations.opacus.register()``,
the CLI).
"""

from dpplugins.accountants.base import Accountant, validate_history
from dpplugins.accountants.pld import PLDAccountant
from dpplugins.accountants.registry import available, create, get_class, register

__all__ = ["Accountant", "PLDAccountant", "available", "create", "get_class", "register",
           "validate_history"]
