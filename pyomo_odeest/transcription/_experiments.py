r"""Several experiments sharing parameters as one Pyomo model.

:func:`build_experiment_blocks` renders a problem with several
:class:`~pyomo_odeest.problem._declaration.Experiment`\ s as one Block holding the
shared parameter variables ``u`` and one :func:`~pyomo_odeest.transcription._block.build_block`
block per experiment (named after the experiment) whose ``u`` is a Reference
to the shared variables:

================================  ===============================================
component                         meaning
================================  ===============================================
``b.u[p]``                         every parameter (globals and each experiment's
                                   copies of the local ones)
``b.<experiment>``                 the block of that experiment (its own grid,
                                   states, stage equations, ``misfit``; its
                                   ``objective`` is deactivated)
``b.misfit``, ``b.penalty``        sums over the experiments' blocks
``b.objective``                    minimize ``b.misfit + b.penalty`` + user terms
``b.param_<name>``                 parameter constraint r(u) <= 0
================================  ===============================================

The NLP is the experiments' discrete problems [GM-grad, eq. (2)] side by side
with a summed objective, so the multipliers of each experiment's stage
equations are that experiment's discrete adjoint.
"""
from __future__ import annotations

import pyomo.environ as pyo

from ..discretization._experiments import experiment_grid
from ..problem._declaration import EstimationProblem, ProblemError
from ._block import add_parameter_constraints, build_block, set_parameter_vars

__all__ = ["build_experiment_blocks"]


def build_experiment_blocks(problem: EstimationProblem, scheme="adams_pc", qmax=None, grid=None,
                            max_step=None, steps_per_interval=None, block=None, build=None):
    """One block per experiment of ``problem`` under one Block with shared parameters.

    Arguments as :func:`~pyomo_odeest.transcription._block.build_block`; ``grid`` is
    a mapping experiment name -> Grid (or None; ``max_step`` /
    ``steps_per_interval`` then apply to every experiment).  ``build``, if
    given, renders each experiment's block instead of ``build_block``:
    ``build(index, experiment_problem, parameters)`` returns a block with
    ``misfit`` and ``objective`` (and optionally ``penalty``) whose ``u`` refers to
    ``parameters`` (the adaptive model (55) renders its blocks so,
    :func:`~pyomo_odeest.transcription._adaptive_block.build_adaptive_block`).
    The returned block has the components of the module docstring and the
    attributes ``problem`` and ``experiment_blocks`` (in experiment order).
    """
    if not problem.experiments:
        raise ProblemError("build_experiment_blocks needs a problem with experiments; "
                           "use build_block for a single experiment")
    b = block if block is not None else pyo.Block(concrete=True)
    b.problem = problem
    b.P = pyo.Set(initialize=problem.parameter_names, ordered=True)
    b.u = pyo.Var(b.P)
    set_parameter_vars(b.u, problem.parameters)
    blocks = []
    for i, (e, sp) in enumerate(zip(problem.experiments, problem.experiment_problems)):
        if b.component(e.name) is not None:
            raise ProblemError(f"experiment name '{e.name}' clashes with a block component")
        sb = (build_block(sp, scheme, qmax, experiment_grid(grid, e.name), max_step,
                          steps_per_interval, parameters=b.u) if build is None
              else build(i, sp, b.u))
        b.add_component(e.name, sb)
        sb.objective.deactivate()
        blocks.append(sb)
    b.experiment_blocks = blocks
    b.misfit = pyo.Expression(expr=sum(sb.misfit for sb in blocks))
    b.penalty = pyo.Expression(expr=sum(sb.penalty for sb in blocks
                                        if sb.component("penalty") is not None))
    b.extra_objective_terms = []
    b.objective = pyo.Objective(expr=b.misfit + b.penalty)
    usub = {sym: b.u[p] for sym, p in zip(problem.u_sym, problem.parameter_names)}
    add_parameter_constraints(b, problem.parameter_constraints, usub)
    return b
