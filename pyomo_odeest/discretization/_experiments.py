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

__all__ = ["ExperimentModels", "experiment_grid"]


def experiment_grid(grid, name):
    """The grid of experiment ``name`` from ``grid`` (None or a mapping name -> Grid)."""
    if grid is None:
        return None
    if isinstance(grid, Mapping):
        if name not in grid:
            raise ProblemError(f"grid: no grid for experiment '{name}' (give one Grid per "
                               f"experiment, or none)")
        return grid[name]
    if isinstance(grid, Grid):
        raise ProblemError("with several experiments, grid must be a mapping experiment "
                           "name -> Grid (or None)")
    raise TypeError("grid must be a mapping experiment name -> Grid, or None")


class ExperimentModels:
    """Sum of per-experiment models with the interface of one model.

    ``models[e]`` has ``objective(u[, traj])``, ``gradient(u, method[, traj])``
    and ``hessian(u, method)`` (a
    :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` or a
    :class:`~pyomo_odeest.approaches.continuous.ContinuousModel`).  A
    trajectory of the sum is the tuple of the experiments' trajectories.

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

    def simulate(self, u, *args, **kw):
        return tuple(m.simulate(u, *args, **kw) for m in self.models)

    def objective(self, u, traj=None):
        trajs = traj if traj is not None else (None,) * len(self.models)
        return float(sum(m.objective(u) if tr is None else m.objective(u, tr)
                         for m, tr in zip(self.models, trajs)))

    def gradient(self, u, method="adjoint", traj=None, **kw):
        trajs = traj if traj is not None else (None,) * len(self.models)
        out = np.zeros(self.m)
        for m, tr in zip(self.models, trajs):
            out += (m.gradient(u, method, **kw) if tr is None
                    else m.gradient(u, method, tr, **kw))
        return out

    def hessian(self, u, method="soa", **kw):
        return sum(np.asarray(m.hessian(u, method, **kw), dtype=float) for m in self.models)

    def value_and_gradient(self, u, method="adjoint"):
        traj = self.simulate(u)
        return self.objective(u, traj), self.gradient(u, method, traj)
