"""The outcome of an estimation: one :class:`Status` for every optimizer.

Each optimizer's own stop is mapped once, here (:func:`status_from_ipopt`,
:func:`status_from_scipy`); its text is kept as ``EstimationResult.message``.
``success`` is derived from the status in one place, :attr:`Status.success`,
and every check that judges an optimizer's stop changes a status by one rule,
:func:`demote`.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["Status", "status_from_ipopt", "status_from_scipy", "demote"]


class Status(str, Enum):
    """How an estimation ended.

    ==================== ==========================================================
    ``CONVERGED``        the optimizer's convergence test holds (Ipopt
                         ``Solve_Succeeded``, SciPy ``success``)
    ``ACCEPTABLE``       Ipopt's looser "acceptable" test holds
                         (``Solved_To_Acceptable_Level``)
    ``MAX_ITERATIONS``   the iteration (or evaluation) limit was reached
    ``TIME_LIMIT``       ``max_wall_time`` (or Ipopt's CPU-time limit) was reached
    ``INFEASIBLE``       the constraints cannot be satisfied (Ipopt
                         ``Infeasible_Problem_Detected``)
    ``NOT_STATIONARY``   the optimizer stopped, but the projected gradient at
                         its point is not small: not a minimum
    ``SIMULATION_FAILED`` the model cannot be simulated at the start (or at
                         the final point)
    ``EVALUATION_ERRORS`` the optimizer kept stepping where the model cannot
                         be evaluated
    ``INTERRUPTED``      stopped on request (a callback, ``User_Requested_Stop``)
    ``NOT_RESOLVED``     the optimizer converged on a grid that does not resolve
                         the ODE at its estimates (the grid certificate fails
                         after the refinement stage; docs/checks.md): an
                         optimum of the discretization, not of the ODE problem
    ``FAILED``           any other stop (restoration failure, diverging
                         iterates, an error in the step computation, ...)
    ==================== ==========================================================

    Only ``CONVERGED`` and ``ACCEPTABLE`` are a success.  The value is the
    lower-case name, which is what the JSON form of a result stores.
    """

    CONVERGED = "converged"
    ACCEPTABLE = "acceptable"
    MAX_ITERATIONS = "max_iterations"
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    NOT_STATIONARY = "not_stationary"
    SIMULATION_FAILED = "simulation_failed"
    EVALUATION_ERRORS = "evaluation_errors"
    INTERRUPTED = "interrupted"
    NOT_RESOLVED = "discretization_not_resolved"
    FAILED = "failed"

    def __str__(self):
        return self.value

    @property
    def success(self) -> bool:
        """True for a (local) optimum: ``CONVERGED`` or ``ACCEPTABLE``."""
        return self in (Status.CONVERGED, Status.ACCEPTABLE)

    @classmethod
    def parse(cls, value) -> "Status":
        """A :class:`Status` from itself, its value or its name (JSON, user input)."""
        if isinstance(value, cls):
            return value
        text = str(value)
        for s in cls:
            if text in (s.value, s.name):
                return s
        raise ValueError(f"unknown status {value!r}; one of {[s.value for s in cls]}")


_IPOPT = {
    "Solve_Succeeded": Status.CONVERGED,
    "Solved_To_Acceptable_Level": Status.ACCEPTABLE,
    "Maximum_Iterations_Exceeded": Status.MAX_ITERATIONS,
    "Maximum_CpuTime_Exceeded": Status.TIME_LIMIT,
    "Maximum_WallTime_Exceeded": Status.TIME_LIMIT,
    "Infeasible_Problem_Detected": Status.INFEASIBLE,
    "User_Requested_Stop": Status.INTERRUPTED,
    "Invalid_Number_Detected": Status.EVALUATION_ERRORS,
}


def status_from_ipopt(name: str) -> Status:
    """The :class:`Status` of Ipopt's return status ``name`` (``'Solve_Succeeded'``, ...)."""
    return _IPOPT.get(str(name), Status.FAILED)


def status_from_scipy(sol, method: str) -> Status:
    """The :class:`Status` of a SciPy ``OptimizeResult`` of ``minimize(method=...)`` or
    ``least_squares``: success, the iteration/evaluation limit, or another stop."""
    if bool(getattr(sol, "success", False)):
        return Status.CONVERGED
    code = getattr(sol, "status", None)
    limit = {"L-BFGS-B": (1,), "trust-constr": (0,), "least_squares": (0,)}.get(method, ())
    if code in limit:
        return Status.MAX_ITERATIONS
    return Status.FAILED


def demote(outcome, status: Status, why: str, force: bool = False) -> bool:
    """The one rule by which a check changes the status of an ``outcome`` (an
    :class:`~pyomo_odeest.problem.EstimationResult` or an optimizer's outcome: any
    object with ``status`` and ``message``).

    A success becomes ``status``, with ``why`` appended to the message: the check
    found that the point is not what the optimizer's test said (not stationary,
    not resolved by its grid, a noise alternation that did not settle).  A stop that
    is already not a success keeps its status, which names the first cause.
    ``force``: the check invalidates whatever the optimizer returned (a final
    simulation that fails, a root that is not the steady state, repeated failed
    evaluations that stopped it), so the status becomes ``status`` in any case.
    Returns True when the status changed.
    """
    status = Status.parse(status)
    if not (force or outcome.status.success) or outcome.status is status:
        return False
    outcome.status = status
    outcome.message = f"{outcome.message}; {why}" if outcome.message else why
    return True
