r"""Several experiments as one model: objectives, gradients and Hessians summed.

For a problem with several :class:`~pyomo_odeest.problem._declaration.Experiment`\ s,

.. math:: J(u) = \sum_e J_e(u),\qquad \nabla J = \sum_e \nabla J_e,\qquad
          \nabla^2 J = \sum_e \nabla^2 J_e,

each :math:`J_e` from one simulation of experiment e (its own grid, initial
state and data) over the full parameter vector, so the derivatives of each
term are those of the single-experiment model (discrete adjoint
[GM-grad, eqs. (52), (54)] or the continuous adjoint [MHV, eqs. (15)–(16)]).
The problem's penalty :math:`R(u)` belongs to the first experiment's term.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..problem._declaration import ProblemError
from ._grid import Grid

__all__ = ["ExperimentModels", "experiment_grid", "experiment_option", "join_experiments",
           "experiment_models"]


def experiment_option(value, name, option="grid"):
    """The value of ``option`` for experiment ``name``: ``value`` itself for a
    problem without experiments (``name`` None), else ``value[name]`` of a
    mapping experiment name -> value (None stays None)."""
    if name is None or value is None:
        return value
    if isinstance(value, Mapping):
        if name not in value:
            raise ProblemError(f"{option}: no {option} for experiment '{name}' (give a mapping "
                               f"with every experiment, or None)")
        return value[name]
    if option == "grid" and not isinstance(value, Grid):
        raise TypeError("grid must be a mapping experiment name -> Grid, or None")
    raise ProblemError(f"with several experiments, {option} must be a mapping experiment "
                       f"name -> {option} (or None)")


def experiment_grid(grid, name):
    """The grid of experiment ``name`` (:func:`experiment_option`)."""
    return experiment_option(grid, name, "grid")


def join_experiments(problem, models):
    """The model of ``problem`` from its experiments' models (in
    ``problem.subproblems`` order): the one model of a problem without
    experiments, else their sum, an :class:`ExperimentModels`."""
    return ExperimentModels(problem, models) if problem.experiments else models[0]


def experiment_models(model):
    """The experiments' models of a model joined by :func:`join_experiments`."""
    return model.models if isinstance(model, ExperimentModels) else [model]


class ExperimentModels:
    """Sum of per-experiment models with the interface of one model.

    ``models[e]`` has ``objective(u[, traj])``, ``gradient(u, method[, traj],
    **options)`` and ``hessian(u, method, **options)`` (a
    :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`, an
    :class:`~pyomo_odeest.discretization.adaptive.AdaptiveModel` or a
    :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`: the continuous
    models' ``index`` is passed by name).  A trajectory of the sum is the tuple of
    the experiments' trajectories.  The loss constant, the misfit without it and
    the evaluation counts are summed too, where the models have them; any other
    attribute is the first model's (settings the experiments share: scheme, rtol).

    Parameters
    ----------
    problem : EstimationProblem
        The problem with experiments (``problem.experiment_problems[e]`` is
        the problem of ``models[e]``).
    models : sequence of models
    """

    def __init__(self, problem, models):
        self.problem = problem
        self.models = list(models)
        self.names = problem.experiment_names
        self.m = len(problem.parameters)

    def __getattr__(self, name):
        # settings shared by the experiments' models (scheme, rtol, ...)
        if name.startswith("__") or name in ("models", "problem", "names"):
            raise AttributeError(name)
        return getattr(self.__dict__["models"][0], name)

    def _trajs(self, traj):
        return traj if traj is not None else (None,) * len(self.models)

    def simulate(self, u, *args, **kw):
        return tuple(m.simulate(u, *args, **kw) for m in self.models)

    def objective(self, u=None, traj=None):
        return float(sum(m.objective(u) if tr is None else m.objective(u, tr)
                         for m, tr in zip(self.models, self._trajs(traj))))

    def gradient(self, u=None, method="adjoint", traj=None, **kw):
        return sum((np.asarray(m.gradient(u, method, **kw) if tr is None
                               else m.gradient(u, method, tr, **kw), dtype=float)
                    for m, tr in zip(self.models, self._trajs(traj))), 0)

    def hessian(self, u=None, method="soa", **kw):
        return sum(np.asarray(m.hessian(u, method, **kw), dtype=float) for m in self.models)

    def value_and_gradient(self, u, method="adjoint"):
        traj = self.simulate(u)
        return self.objective(u, traj), self.gradient(u, method, traj)

    @property
    def constant(self):
        return float(sum(m.constant for m in self.models))

    def _misfit(self, u):
        return float(sum(m._misfit(u) for m in self.models))

    @property
    def counts(self):
        return {k: sum(m.counts[k] for m in self.models) for k in self.models[0].counts}
