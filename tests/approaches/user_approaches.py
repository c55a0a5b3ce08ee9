"""Approaches of a user's, run by ``estimate(problem, cls)`` through the same
pipeline as the front door's names (the conformance matrix of ``test_base.py``,
the progress and time-limit tests of ``test_approach_progress.py``)."""
from pyomo_odeest.approaches import IPOPT_DEFAULTS, Outcome, approach_class
from pyomo_odeest.nlp import solve_with_ipopt


class PlainIpoptReduced(approach_class("reduced_space")):
    """The reduced space (simulate the discrete equations; adjoint gradient, exact
    Hessian by the second-order adjoint) with its solve hook written as a user would
    write it: one call of Ipopt with the defaults and the user's ``options``, nothing
    said of progress or of the time limit (the pipeline owns both) nor of scaling."""

    name = "plain_ipopt_reduced"

    def solve(self, built, cfg):
        _, nlp = built
        return Outcome.from_ipopt(solve_with_ipopt(nlp, options={**IPOPT_DEFAULTS,
                                                                 **(cfg.options or {})}))
