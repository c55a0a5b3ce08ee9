"""The pieces a problem is declared with: parameters, experiments, constraints and losses
(:class:`~pyomo_odeest.problem._declaration.EstimationProblem` puts them together)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ._validation import ProblemError

#: Name of the time symbol: not an identifier, so no state or parameter has it.
TIME_NAME = "t(time)"

__all__ = ["Parameter", "Experiment", "Preequilibration", "PathConstraint", "ParameterConstraint", "LeastSquares",
           "GaussianNLL"]


@dataclass
class Parameter:
    """An unknown (or fixed) parameter u_k.

    Parameters
    ----------
    name : str
    value : float
        Initial guess (or the value, if ``fixed``).
    lb, ub : float or None
        Bounds.
    fixed : bool
        Keep the parameter at ``value`` during estimation.
    local : bool
        Problems with several experiments (:class:`Experiment`) only: one copy of the
        parameter per experiment, named ``<name>_<experiment>`` (e.g. an
        initial concentration estimated per experiment).  Inside ``rhs``,
        ``initial`` and ``observe`` it is still written ``u.<name>``.
    """

    name: str
    value: float = 1.0
    lb: float | None = None
    ub: float | None = None
    fixed: bool = False
    local: bool = False

    def __post_init__(self):
        _check_names([self.name], "parameter")
        for what in ("value", "lb", "ub"):
            v = getattr(self, what)
            if v is not None and not np.isfinite(float(v)):
                raise ProblemError(f"parameter '{self.name}': {what}={v} is not finite")
        if self.lb is not None and self.ub is not None and self.lb > self.ub:
            raise ProblemError(f"parameter '{self.name}': lb={self.lb} > ub={self.ub}")
        if not self.fixed and ((self.lb is not None and self.value < self.lb)
                               or (self.ub is not None and self.value > self.ub)):
            raise ProblemError(f"parameter '{self.name}': start value {self.value} is outside "
                               f"its bounds [{self.lb}, {self.ub}]; start inside the bounds "
                               f"(it would otherwise be moved silently)")

    @property
    def bounds(self):
        """``(lb, ub)`` as floats, an absent bound as ``-inf`` or ``inf``."""
        return (-np.inf if self.lb is None else float(self.lb),
                np.inf if self.ub is None else float(self.ub))


@dataclass
class Experiment:
    r"""One experiment of a problem with several data sets sharing parameters.

    An experiment has its own data, initial state, weights and time horizon;
    the dynamics ``rhs`` and the observation function ``observe`` are the
    problem's.  Pass a list of experiments as ``EstimationProblem(...,
    data=None, experiments=[...])``; the objective is the sum of the
    experiments' misfits (plus the problem's penalty, once):

    .. math:: J(u) = \sum_e \sum_j \varphi_{e,j}\big(g(x_e(\tau_{e,j}), u_e, \tau_{e,j}),
              \bar z_{e,j}\big) + R(u),\qquad \dot x_e = f(x_e, u_e, t),\;
              x_e(t_{0,e}) = l_e(u_e),

    where :math:`u_e` holds the global parameters and experiment e's copies
    of the local ones (:attr:`Parameter.local`).

    Parameters
    ----------
    name : str
        A Python identifier; local parameter ``k`` of experiment ``e1`` is
        named ``k_e1`` in the estimates.
    data : pandas.DataFrame
        Measurements (wide or long format, as ``EstimationProblem.data``).
    initial : mapping state -> number | parameter name | callable(u), optional
        Overrides entries of the problem's ``initial``.  A parameter name may
        be a local parameter (the initial state is then estimated per
        experiment) or a global one.
    sigma, weights : optional
        As for :class:`EstimationProblem`; default: the problem's.
    t0, T : float, optional
        Time horizon; default: the problem's ``t0`` and the last
        measurement time (or the problem's ``T``).
    parameters : mapping name -> float or Parameter, optional
        Start value (a float) or start value, bounds and ``fixed`` flag (a
        :class:`Parameter`) of this experiment's copy of a local parameter.
    inputs : mapping name -> Input, optional
        This experiment's inputs (:mod:`pyomo_odeest.problem._inputs`),
        overriding the problem's.
    preequilibration : Preequilibration, optional
        The experiment starts from a steady state (see :class:`Preequilibration`;
        its ``initial`` and ``parameters`` may name local parameters).
    observables : sequence of str, optional
        The observables of the problem's ``observe`` this experiment measures
        (default: all of them).  An experiment that measures a few of many
        observables builds the derivatives of those only; its ``fitted`` frame
        has their columns only.

    Example
    -------
    >>> prob = EstimationProblem(                                  # doctest: +SKIP
    ...     states=["A", "B"],
    ...     parameters=[Parameter("k1", 1.0, lb=0), Parameter("A0", 1.0, local=True)],
    ...     rhs=lambda x, u, t: [-u.k1 * x.A, u.k1 * x.A],
    ...     initial={"A": "A0", "B": 0.0}, data=None,
    ...     experiments=[Experiment("e1", df1, parameters={"A0": 2.0}),
    ...                  Experiment("e2", df2, initial={"B": 0.5}, T=12.0)])
    >>> prob.parameter_names                                       # doctest: +SKIP
    ['k1', 'A0_e1', 'A0_e2']

    Every approach estimates such a problem (one simultaneous block per
    experiment under one model; one simulation per experiment, objectives
    and gradients summed, in the sequential approaches); the result's
    ``states``, ``fitted`` and ``residuals`` (and the multipliers of the
    simultaneous approach) are DataFrames indexed by ``(experiment, time)``.
    ``problem.experiment_problems`` holds one single-experiment
    :class:`EstimationProblem` per experiment over the full parameter vector.
    """

    name: str
    data: object = None
    initial: Mapping | None = None
    sigma: object = None
    weights: object = None
    t0: float | None = None
    T: float | None = None
    parameters: Mapping | None = None
    inputs: Mapping | None = None
    preequilibration: "Preequilibration | None" = None
    observables: Sequence | None = None

    def __post_init__(self):
        _check_names([self.name], "experiment")
        if self.preequilibration is not None and \
                not isinstance(self.preequilibration, Preequilibration):
            raise ProblemError(f"experiment '{self.name}': preequilibration must be a "
                               f"Preequilibration")
        if self.data is None:
            raise ProblemError(f"experiment '{self.name}': data are required")
        for what in ("initial", "parameters"):
            v = getattr(self, what)
            if v is not None and not isinstance(v, Mapping):
                raise ProblemError(f"experiment '{self.name}': {what} must be a mapping")


@dataclass
class Preequilibration:
    r"""The initial state is a steady state of the dynamics (pre-equilibration).

    Before the experiment the system runs, under the pre-equilibration's
    parameter values, from ``initial`` to its steady state :math:`x_{ss}(u)`,
    :math:`f_P(x_{ss}, u) = 0`; the experiment starts at ``t0`` from
    :math:`x_{ss}`, except the states listed in ``reset``, which take their
    value from the problem's (or the experiment's) ``initial``.  Conserved
    moieties of :math:`f_P` are detected and keep their totals from ``initial``
    (:mod:`pyomo_odeest.problem._steady_state`).

    Parameters
    ----------
    parameters : mapping name -> number | parameter name, optional
        Parameter values during pre-equilibration (e.g. ``{"ligand": 0.0}``);
        the others keep their (estimated) values.
    initial : mapping state -> number | parameter name | callable(u), optional
        Where the pre-equilibration starts; entries override the problem's (the
        experiment's) ``initial``.
    rhs : callable ``rhs(x, u, t)``, optional
        Other dynamics during pre-equilibration (default: the problem's); it
        must not depend on ``t`` or on inputs.
    reset : sequence of state names
        States set to their ``initial`` value after pre-equilibration.

    Notes
    -----
    The simultaneous approach adds :math:`x_{ss}` as variables with the
    steady-state equations; the sequential approaches solve them by Newton's
    method (or simulation) with derivatives by the implicit function theorem.
    """

    parameters: Mapping | None = None
    initial: Mapping | None = None
    rhs: object = None
    reset: tuple = ()

    def __post_init__(self):
        for what in ("parameters", "initial"):
            v = getattr(self, what)
            if v is not None and not isinstance(v, Mapping):
                raise ProblemError(f"Preequilibration: {what} must be a mapping")
        if self.rhs is not None and not callable(self.rhs):
            raise ProblemError("Preequilibration: rhs must be callable as rhs(x, u, t)")
        self.reset = (self.reset,) if isinstance(self.reset, str) else tuple(self.reset)


@dataclass
class PathConstraint:
    r"""A path constraint :math:`c(x, u, t) \le 0` on the states.

    Parameters
    ----------
    name : str
        A Python identifier (the block component is ``path_<name>``).
    fn : callable ``fn(x, u, t)``
        One expression, written like ``rhs`` (inputs available as ``u.<input>``).
    at : ``'grid'`` | ``'measurements'``
        Imposed at every grid point (``'grid'``, the default) or at the
        measurement times only.

    Notes
    -----
    The simultaneous, reduced-space and multiple-shooting approaches impose it
    (the sequential ones as constraints over u, and the node values, with
    exact discrete derivatives); the continuous approach at the measurement
    times only (``at='measurements'``, exact sensitivities of the ODE); the
    adaptive approach raises a :class:`ProblemError`.
    """

    name: str
    fn: object
    at: str = "grid"

    def __post_init__(self):
        _check_names([self.name], "constraint")
        if not callable(self.fn):
            raise ProblemError(f"path constraint '{self.name}': fn must be callable as fn(x, u, t)")
        if self.at not in ("grid", "measurements"):
            raise ProblemError(f"path constraint '{self.name}': at must be 'grid' or "
                               f"'measurements', got {self.at!r}")


@dataclass
class ParameterConstraint:
    r"""A constraint :math:`r(u) \le 0` on the parameters (``fn(u)``: one expression)."""

    name: str
    fn: object

    def __post_init__(self):
        _check_names([self.name], "constraint")
        if not callable(self.fn):
            raise ProblemError(f"parameter constraint '{self.name}': fn must be callable as fn(u)")


# ---------------------------------------------------------------------------
# losses φ
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LeastSquares:
    r"""Weighted least squares: :math:`\varphi_j = \sum_o w_{jo} (z_{jo} - \bar z_{jo})^2`.

    Weights are ``1/σ²`` when standard deviations are given, otherwise the
    user's weights, otherwise 1.  Missing measurements contribute nothing.
    """

    def terms(self, r_sym, w):
        return [wi * ri**2 for ri, wi in zip(r_sym, w)]


@dataclass(frozen=True)
class GaussianNLL:
    r"""Gaussian negative log-likelihood with covariance Σ [MHV, eq. (2)–(5)]:

    .. math:: \varphi_j = \tfrac12 r_j^\top Σ^{-1} r_j + \tfrac12 \log\det(2\pi Σ),

    with :math:`r_j = z(\tau_j) - \bar z_j` over the observed quantities of
    time :math:`\tau_j`.  ``cov`` is a matrix over the observed quantities (in
    the problem's observable order) or a vector of variances.  The constant
    term is kept out of the NLP and reported in :attr:`constant`.
    """

    cov: object

    def matrix(self, n_obs):
        c = np.asarray(self.cov, dtype=float)
        if c.ndim == 0:
            c = np.full(n_obs, float(c))
        if c.ndim == 1:
            c = np.diag(c)
        if c.shape != (n_obs, n_obs):
            raise ProblemError(f"GaussianNLL: covariance must be {n_obs}x{n_obs}, got {c.shape}")
        if not np.allclose(c, c.T) or np.any(np.linalg.eigvalsh(c) <= 0):
            raise ProblemError("GaussianNLL: covariance must be symmetric positive definite")
        return c


# ---------------------------------------------------------------------------
# name spaces handed to user functions
# ---------------------------------------------------------------------------


class _Namespace:
    """``ns.name`` and ``ns['name']`` access to named objects."""

    def __init__(self, kind, items):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_items", dict(items))

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_kind", "_items"):
            raise AttributeError(name)          # (un)pickling looks these up before __init__
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"no {self._kind} named '{name}' "
                                 f"(known: {', '.join(self._items)})") from None

    def __getitem__(self, name):
        if isinstance(name, int):
            return list(self._items.values())[name]
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"no {self._kind} named {name!r} "
                           f"(known: {', '.join(self._items)})") from None

    def __iter__(self):
        return iter(self._items.values())

    def __len__(self):
        return len(self._items)


def _check_names(names, what):
    names = list(names)
    for s in names:
        if not isinstance(s, str) or not s.isidentifier():
            raise ProblemError(f"{what} name {s!r} must be a Python identifier")
    if len(set(names)) != len(names):
        raise ProblemError(f"duplicate {what} names in {names}")
    return names
