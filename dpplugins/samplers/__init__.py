"""Framework-free index schedules.

A sampler declares its ``scheme`` (``"shuffled_epochs"``, ``"random_checkin"``,
``"sliding_window"``), its ``num_examples``, ``steps_per_epoch`` (= ``len(sampler)``, the steps of
one pass), ``expected_batch_size`` and ``max_batch_size``; iterating it yields one pass of
``int64`` index arrays drawn from a seeded ``numpy.random.Generator`` (``rng=`` takes a seed or a
Generator).  An empty array is a step without examples: a dummy update for the check-in samplers
(see :mod:`dpplugins.samplers.checkin`).  The torch and tf.data wrappers in
``dpplugins.integrations`` only adapt these schedules.

Example::

    >>> from dpplugins.samplers import RandomCheckIn
    >>> sampler = RandomCheckIn(num_examples=1000, num_slots=100, checkin_probability=0.2, rng=7)
    >>> len(sampler), sampler.scheme
    (100, 'random_checkin')
"""

from dpplugins.errors import check_choice
from dpplugins.samplers.allocation import RandomAllocation
from dpplugins.samplers.checkin import RandomCheckIn, SlidingWindowCheckIn, balls_and_bins
from dpplugins.samplers.shuffled import ShuffledEpochs, make_generator

__all__ = ["RandomAllocation", "RandomCheckIn", "SlidingWindowCheckIn", "ShuffledEpochs",
           "balls_and_bins",
           "make_generator", "SAMPLERS", "SAMPLER_ALIASES", "canonical_sampler"]

#: the canonical sampler (scheme) names, the same in the CLI, the compare tool, Opacus, Keras
#: and TF-Privacy: Poisson subsampling, shuffled epochs, random allocation (balls and bins),
#: random check-ins (Balle et al. 2020) and the sliding window
SAMPLERS = ("poisson", "shuffled_epochs", "random_allocation", "random_checkin",
            "sliding_window")
#: older spellings -> canonical names (mapped here and nowhere else)
SAMPLER_ALIASES = {"shuffle": "shuffled_epochs", "checkin": "random_allocation"}


def canonical_sampler(name) -> str:
    """The canonical name of a sampler name or alias (:data:`SAMPLER_ALIASES`).

    Example::

        >>> canonical_sampler("shuffle")
        'shuffled_epochs'
    """
    name = SAMPLER_ALIASES.get(name, name) if isinstance(name, str) else name
    return check_choice("sampler", name, SAMPLERS)
