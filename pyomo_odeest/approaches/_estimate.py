"""One front door for every approach: :func:`estimate`.

``estimate(problem, approach=..., **options)`` runs the approach's pipeline and
returns an :class:`~pyomo_odeest.EstimationResult` in every case.  Option names
mean the same thing everywhere: the common ones are declared once
(:func:`~pyomo_odeest.approaches._base.common_config`), each approach adds its
own (:func:`approach_config`, the tables of docs/choosing.md); an option the
chosen approach does not take raises a :class:`TypeError` that lists the ones
it does take.
"""
from __future__ import annotations

import importlib

from ..problem._declaration import EstimationProblem
from ..problem._result import RESULT_ANALYSES, EstimationResult
from ._backend import rebuild_backend

__all__ = ["estimate", "APPROACH_NAMES", "approach_options", "approach_config",
           "approach_class"]


#: front-door name -> (module, class) of its approach (the configuration registry)
_REGISTRY = {"simultaneous": ("._simultaneous", "SimultaneousApproach"),
             "reduced_space": ("._reduced", "ReducedApproach"),
             "multiple_shooting": ("._shooting", "ShootingApproach"),
             "continuous": (".continuous", "ContinuousApproach"),
             "adaptive": ("._adaptive", "AdaptiveApproach")}


def approach_class(approach):
    """The :class:`~pyomo_odeest.approaches._base.Approach` of a front-door name (the
    configuration registry)."""
    if not isinstance(approach, str) or approach not in _REGISTRY:
        raise ValueError(f"unknown approach {approach!r}; choose one of {APPROACH_NAMES}")
    module, cls = _REGISTRY[approach]
    return getattr(importlib.import_module(module, __package__), cls)


#: The approaches :func:`estimate` knows, in the order the docs present them.
APPROACH_NAMES = tuple(_REGISTRY)


def approach_options(approach: str) -> tuple:
    """Names of the keyword options that ``approach`` accepts (from its configuration)."""
    return approach_class(approach).option_names()


def approach_config(approach: str):
    """A fresh copy of ``approach``'s configuration (a Pyomo ``ConfigDict``: options
    with their defaults, domains and descriptions)."""
    return approach_class(approach).config()


def estimate(problem: EstimationProblem, approach: str = "simultaneous", **options) -> EstimationResult:
    r"""Estimate the parameters of ``problem`` with the chosen approach.

    .. math::

        \min_u\; J(u) = \sum_i \varphi_i(z(\tau_i), \bar z_i)
        \quad\text{s.t.}\quad \dot x = f(x, u, t),\; x(0) = l(u),\; z = g(x, u, t)

    Every approach runs one pipeline (:class:`~pyomo_odeest.approaches._base.Approach`):
    its options are parsed and validated against its configuration, the start
    values are taken by one rule (:func:`~pyomo_odeest.problem._start.start_values`:
    ``u0`` as a vector, a mapping or a Series; a fixed parameter keeps its value
    and a contradicting start value is refused), the model is built and solved,
    the outcome mapped to a :class:`~pyomo_odeest.Status`, and the post-solve
    checks run once.

    Parameters
    ----------
    problem : EstimationProblem
    approach : str
        One of :data:`APPROACH_NAMES`: ``'simultaneous'`` (the Pyomo block of
        the scheme, states and parameters solved together, [GM-grad, eq. (2)]),
        ``'reduced_space'`` (simulate the same discrete equations; discrete
        adjoint gradient [GM-grad, eqs. (52), (54)]),
        ``'multiple_shooting'`` ([AT, problem (4)]), ``'continuous'``
        (continuous-time adjoint, [MHV, eqs. (15)–(16)]) or ``'adaptive'``
        (the step-size model [GM-grad, eq. (55)]).  ``result.approach`` is
        this name.
    **options
        Common options (``u0``, ``options``, ``tee``, ``scale``,
        ``max_wall_time``, ``progress``; for the approaches that discretize
        ``scheme``, ``qmax``, ``grid``, ``max_step``, ``steps_per_interval``)
        and options of the chosen approach; see :func:`approach_options` and
        :func:`approach_config`.  An option the approach does not take raises
        a :class:`TypeError` that lists the ones it takes.

    Returns
    -------
    EstimationResult
        With known σ, a misfit inconsistent with the noise level (χ² test,
        :func:`~pyomo_odeest.problem._noise.noise_check`) adds a warning to
        ``result.warnings``.

    Examples
    --------
    >>> from pyomo_odeest import estimate
    >>> from pyomo_odeest.models import lotka_volterra_problem
    >>> res = estimate(lotka_volterra_problem(), "reduced_space", gradient="adjoint")  # doctest: +SKIP
    """
    if not isinstance(approach, str):
        raise TypeError(f"approach must be a string, one of {APPROACH_NAMES}; got {approach!r}")
    return approach_class(approach)().estimate(problem, **options)


RESULT_ANALYSES["backend"] = rebuild_backend
