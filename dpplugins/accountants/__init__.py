"""Accountants and their registry.

``create(name, **options)`` builds one by registry name; ``available()`` lists the names;
``supporting(event)`` lists the names of the accountants that can account for an event.  Names
are the same everywhere (our registry, Opacus after ``dpplugins.integrations.opacus.register()``,
TF-Privacy, the CLI).
"""

from dpplugins.accountants.balls_and_bins import RandomAllocationAccountant
from dpplugins.accountants.base import Accountant, UnsupportedEventError, validate_history
from dpplugins.accountants.checkin import CheckInAccountant
from dpplugins.accountants.fdp import GDPAccountant
from dpplugins.accountants.pld import PLDAccountant
from dpplugins.accountants.pnsgd import PNSGDAccountant
from dpplugins.accountants.registry import (available, create, get_class, register,
                                            registered_name, supporting, unregister)
from dpplugins.accountants.shuffle import ShuffleAccountant
from dpplugins.accountants.swap import SwapAccountant

__all__ = ["Accountant", "UnsupportedEventError", "PLDAccountant", "GDPAccountant",
           "ShuffleAccountant", "SwapAccountant", "CheckInAccountant",
           "RandomAllocationAccountant", "PNSGDAccountant", "available", "create", "get_class",
           "register", "registered_name", "supporting", "unregister", "validate_history"]
