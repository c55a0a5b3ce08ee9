"""One front door for every approach: :func:`estimate`.

``estimate(problem, approach=..., **options)`` dispatches to the
per-approach implementation and returns an
:class:`~pyomo_odeest.EstimationResult` in every case.  Option names mean the
same thing everywhere:

* ``scheme``, ``qmax``: the multistep scheme and its maximum order;
* ``grid``: an explicit :class:`~pyomo_odeest.Grid`;
* ``max_step``: largest step of the generated grid;
* ``steps_per_interval``: steps between consecutive measurement times;
* ``u0``: start values of the parameters (default: the problem's);
* ``options``: Ipopt (or optimizer) options, a dict;
* ``tee``: print the solver's log;
* ``scale``: scale the parameters by their start values.

Options specific to one approach (``gradient``, ``hessian``, ``optimizer``,
``nodes``, ``formulation``, ``method``, ...) are passed through; an option the
chosen approach does not take raises a :class:`TypeError` that lists the ones
it does take.
"""
from __future__ import annotations

import inspect

from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import EstimationResult
from ..discretization._size_guard import validate_estimator

__all__ = ["estimate", "APPROACH_NAMES", "approach_options"]


def _implementation(approach):
    if approach == "simultaneous":
        from ._simultaneous import estimate_simultaneous as fn
    elif approach == "reduced_space":
        from ._reduced import estimate_reduced as fn
    elif approach == "multiple_shooting":
        from ._shooting import estimate_multiple_shooting as fn
    elif approach == "continuous":
        from .continuous import estimate_continuous as fn
    elif approach == "adaptive":
        from ..transcription._adaptive_block import estimate_adaptive as fn
    else:
        raise ValueError(f"unknown approach {approach!r}; choose one of {APPROACH_NAMES}")
    return fn


#: The approaches :func:`estimate` knows, in the order the docs present them.
APPROACH_NAMES = ("simultaneous", "reduced_space", "multiple_shooting", "continuous", "adaptive")


def approach_options(approach: str) -> tuple:
    """Names of the keyword options that ``approach`` accepts."""
    sig = inspect.signature(_implementation(approach))
    return tuple(p for p in sig.parameters if p != "problem")


def estimate(problem: EstimationProblem, approach: str = "simultaneous", **options) -> EstimationResult:
    r"""Estimate the parameters of ``problem`` with the chosen approach.

    .. math::

        \min_u\; J(u) = \sum_i \varphi_i(z(\tau_i), \bar z_i)
        \quad\text{s.t.}\quad \dot x = f(x, u, t),\; x(0) = l(u),\; z = g(x, u, t)

    Parameters
    ----------
    problem : EstimationProblem
    approach : str
        ``'simultaneous'`` (the Pyomo block of the scheme, states and
        parameters solved together, [GM-grad, eq. (2)]),
        ``'reduced_space'`` (simulate the same discrete equations; discrete
        adjoint gradient [GM-grad, eqs. (52), (54)]),
        ``'multiple_shooting'`` ([AT, problem (4)]), ``'continuous'``
        (continuous-time adjoint, [MHV, eqs. (15)–(16)]) or ``'adaptive'``
        (the step-size model [GM-grad, eq. (55)]).
    **options
        Common options (``scheme``, ``qmax``, ``grid``, ``max_step``,
        ``steps_per_interval``, ``u0``, ``options``, ``tee``, ``scale``) and
        options of the chosen approach; see :func:`approach_options`.

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
    fn = _implementation(approach)
    accepted = approach_options(approach)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(f"approach {approach!r} does not take option(s) {unknown}; "
                        f"it takes {list(accepted)}")
    if not isinstance(problem, EstimationProblem):
        raise ProblemError(f"problem must be an EstimationProblem, got {type(problem).__name__}")
    if approach == "adaptive":
        validate_estimator("adaptive", problem, **options)
    from ..problem._result import post_solve_checks
    return post_solve_checks(problem, fn(problem, **options))
