"""One front door for every approach: :func:`estimate`.

``estimate(problem, approach=..., **options)`` runs the approach's pipeline and
returns an :class:`~pyomo_odeest.EstimationResult` in every case.  The approach
is a name of the registry (:data:`APPROACH_NAMES`), an
:class:`~pyomo_odeest.approaches.Approach` subclass or an instance of one.
Option names mean the same thing everywhere: the common ones are declared once
(:func:`~pyomo_odeest.approaches._base.common_config`), each approach adds its
own (:func:`approach_config`, the tables of docs/choosing.md); an option the
chosen approach does not take raises a :class:`TypeError` that lists the ones
it does take.
"""
from __future__ import annotations

from ..problem._declaration import EstimationProblem
from ..problem._result import RESULT_ANALYSES, EstimationResult
from ._adaptive import AdaptiveApproach
from ._backend import backend_data, rebuild_backend
from ._base import Approach
from ._reduced import ReducedApproach
from ._shooting import ShootingApproach
from ._simultaneous import SimultaneousApproach
from ._continuous import ContinuousApproach

__all__ = ["estimate", "APPROACH_NAMES", "approach_options", "approach_config",
           "approach_class"]


#: front-door name -> approach class (the configuration registry), in the order the
#: docs present them
_REGISTRY = {cls.name: cls for cls in (SimultaneousApproach, ReducedApproach, ShootingApproach,
                                       ContinuousApproach, AdaptiveApproach)}

#: The approaches :func:`estimate` knows by name, in the order the docs present them.
APPROACH_NAMES = tuple(_REGISTRY)

_ACCEPTED = (f"an approach name (one of {', '.join(APPROACH_NAMES)}), an Approach subclass "
             f"or an instance of one")


def approach_class(approach):
    """The :class:`~pyomo_odeest.approaches.Approach` subclass of ``approach``: a
    front-door name (the configuration registry; unknown: :class:`ValueError`),
    an Approach subclass (itself) or an instance of one (its class); anything
    else is a :class:`TypeError`."""
    if isinstance(approach, str):
        if approach not in _REGISTRY:
            raise ValueError(f"unknown approach {approach!r}; choose one of {APPROACH_NAMES}")
        return _REGISTRY[approach]
    if isinstance(approach, type) and issubclass(approach, Approach):
        return approach
    if isinstance(approach, Approach):
        return type(approach)
    raise TypeError(f"approach must be {_ACCEPTED}; got {approach!r}")


def approach_options(approach) -> tuple:
    """Names of the keyword options that ``approach`` (a name, an Approach subclass or
    instance) accepts (from its configuration)."""
    return approach_class(approach).option_names()


def approach_config(approach):
    """A fresh copy of ``approach``'s configuration (a Pyomo ``ConfigDict``: options
    with their defaults, domains and descriptions; ``approach``: a name, an Approach
    subclass or instance)."""
    return approach_class(approach).config()


def estimate(problem: EstimationProblem, approach="simultaneous", **options) -> EstimationResult:
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
    approach : str, Approach subclass or Approach instance
        One of :data:`APPROACH_NAMES`: ``'simultaneous'`` (the Pyomo block of
        the scheme, states and parameters solved together, [GM-grad, eq. (2)]),
        ``'reduced_space'`` (simulate the same discrete equations; discrete
        adjoint gradient [GM-grad, eqs. (52), (54)]),
        ``'multiple_shooting'`` ([AT, problem (4)]), ``'continuous'``
        (continuous-time adjoint, [MHV, eqs. (15)–(16)]) or ``'adaptive'``
        (the step-size model [GM-grad, eq. (55)]).  ``result.approach`` is
        this name.

        Or an approach of your own (see docs/architecture.md, section "An
        approach of your own"): a subclass of
        :class:`~pyomo_odeest.approaches.Approach` (or of an approach of the
        registry, :func:`approach_class`), run on a fresh instance as a name
        is; or an instance of one, ``MyApproach(**preset)``, whose preset
        options the call's ``options`` override (each call starts from the
        presets again; the instance is used as it is, not copied, so what its
        hooks keep on it stays after the call, and one instance runs one
        estimation at a time).  ``result.approach`` is the class's ``name``.
        Anything else is a :class:`TypeError` naming what is accepted.
    **options
        Common options (``u0``, ``options``, ``tee``, ``scale``,
        ``max_wall_time``, ``progress``: the pipeline's, whatever the approach;
        for the approaches that discretize
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
    >>> from pyomo_odeest.approaches import approach_class
    >>> lbfgs = approach_class("reduced_space")(optimizer="L-BFGS-B")   # preset options
    >>> res = estimate(lotka_volterra_problem(), lbfgs, max_step=0.1)  # doctest: +SKIP
    """
    if isinstance(approach, Approach):
        return approach.estimate(problem, **options)
    return approach_class(approach)().estimate(problem, **options)


RESULT_ANALYSES.update(backend=rebuild_backend, backend_data=backend_data)
