"""A thin adapter from an :class:`~pyomo_odeest.nlp._protocol.NLPEvaluator` to cyipopt.

* cyipopt is imported lazily; a missing module gives a message naming the
  package to install.
* Failed evaluations (:class:`~pyomo_odeest.nlp._protocol.EvaluationError`,
  arithmetic errors, ``ValueError``) become ``cyipopt.CyIpoptEvaluationError``
  so that Ipopt rejects the trial step and backs off instead of stopping.
* Any other exception raised in a callback, in the user's ``intermediate``
  callback, or Ctrl-C stops the solve and is re-raised by
  :func:`solve_with_ipopt` once Ipopt has returned (cyipopt's Hessian wrapper
  swallows exceptions): see docs/solver.md, the list at the top.
* Options given as Python ints are accepted where Ipopt takes a real number
  (``bound_relax_factor=0``).
* Time spent in callbacks and the iteration count are recorded.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ._forked import CAN_FORK, run_forked
from ._memory import RELEASE_MEMORY_MIN_VARIABLES, release_free_memory
from ._progress import IterationProgress, progress_enabled, time_left
from ._protocol import EvaluationError

__all__ = ["import_cyipopt", "IpoptResult", "solve_with_ipopt", "start_value_scaling",
           "ipopt_version", "MUMPS_DEFAULTS",
           "start_value_magnitude",
           "CYIPOPT_MISSING"]

CYIPOPT_MISSING = (
    "cyipopt is not installed (a dependency of pyomo_odeest: was it installed with\n"
    "--no-deps?). Install the Ipopt wheel with\n"
    "    pip install cyipopt-wheels\n"
    "or, in a conda environment, conda install -c conda-forge cyipopt."
)

# Ipopt ApplicationReturnStatus codes (IpReturnCodes_inc.h)
#: Ipopt's code of Maximum_WallTime_Exceeded
WALL_TIME_CODE = -5
#: seconds past ``max_wall_time`` after which an isolated solve (see
#: :func:`solve_with_ipopt`, ``isolate``) is killed inside whatever it is doing
HARD_LIMIT_GRACE = 3.0

IPOPT_STATUS = {
    0: "Solve_Succeeded",
    1: "Solved_To_Acceptable_Level",
    2: "Infeasible_Problem_Detected",
    3: "Search_Direction_Becomes_Too_Small",
    4: "Diverging_Iterates",
    5: "User_Requested_Stop",
    6: "Feasible_Point_Found",
    -1: "Maximum_Iterations_Exceeded",
    -2: "Restoration_Failed",
    -3: "Error_In_Step_Computation",
    -4: "Maximum_CpuTime_Exceeded",
    -5: "Maximum_WallTime_Exceeded",
    -10: "Not_Enough_Degrees_Of_Freedom",
    -11: "Invalid_Problem_Definition",
    -12: "Invalid_Option",
    -13: "Invalid_Number_Detected",
    -100: "Unrecoverable_Exception",
    -101: "NonIpopt_Exception_Thrown",
    -102: "Insufficient_Memory",
    -199: "Internal_Error",
}


def ipopt_version():
    """Ipopt's version as a tuple of ints (None without cyipopt)."""
    try:
        import cyipopt
    except ImportError:
        return None
    v = getattr(cyipopt, "IPOPT_VERSION", None)
    return tuple(int(p) for p in v) if v is not None else None


def import_cyipopt():
    try:
        import cyipopt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(CYIPOPT_MISSING) from err
    return cyipopt


@dataclass
class IpoptResult:
    x: np.ndarray
    obj: float
    mult_g: np.ndarray
    mult_x_L: np.ndarray
    mult_x_U: np.ndarray
    g: np.ndarray
    status: int
    status_name: str
    message: str
    iterations: int
    eval_s: float
    ipopt_s: float
    counts: dict = field(default_factory=dict)


def _forwarded(name):
    """A callback of :class:`_Problem` that evaluates ``name`` through ``_call``."""
    return lambda self, *args: self._call(name, *args)


class _Problem:
    """The callback object handed to ``cyipopt.Problem``."""

    def __init__(self, ev, cyipopt, intermediate=None, progress=None):
        self.ev = ev
        self._progress = progress
        self._err = cyipopt.CyIpoptEvaluationError
        self.eval_s = 0.0
        self.iterations = 0
        self.counts = dict(objective=0, gradient=0, constraints=0, jacobian=0, hessian=0)
        self._user_intermediate = intermediate
        #: the callback takes ``iterate`` (a function returning Ipopt's current primal
        #: iterate, unscaled)
        self._wants_iterate = intermediate is not None and _takes(intermediate, "iterate")
        #: the cyipopt problem (set by solve_with_ipopt): the current iterate's source
        self.nlp = None
        self.error = None            # the exception that aborted the solve
        self.error_in = None         # the callback it was raised in
        #: perf_counter time after which no evaluation runs (max_wall_time): Ipopt checks
        #: its limit between iterations only, a restoration phase or a line search can
        #: run long past it
        self.deadline = None
        self.expired = False
        #: (cyipopt problem, shared array) of an isolated solve: each iteration writes
        #: its iterate there, read by the parent if it has to kill the solve
        self.share = None

    def abort(self, err, where):
        if self.error is None:
            self.error, self.error_in = err, where

    def _call(self, name, *args):
        if self.error is not None:
            # aborted: nothing more is evaluated; Ipopt stops at the next iteration
            raise self._err(f"solve aborted by {type(self.error).__name__} in {self.error_in}")
        t = time.perf_counter()
        if self.deadline is not None and t > self.deadline:
            self.expired = True              # Ipopt stops at the next iteration
            raise self._err("max_wall_time exceeded")
        self.counts[name] += 1
        try:
            return getattr(self.ev, name)(*args)
        except (EvaluationError, ArithmeticError, ValueError) as err:
            raise self._err(str(err)) from None
        except BaseException as err:                 # noqa: BLE001 - re-raised after the solve
            self.abort(err, name)
            raise self._err(f"solve aborted by {type(err).__name__} in {name}") from None
        finally:
            self.eval_s += time.perf_counter() - t

    objective, gradient, constraints, jacobian, hessian = map(
        _forwarded, ("objective", "gradient", "constraints", "jacobian", "hessian"))

    def jacobianstructure(self):
        return self.ev.jacobian_structure()

    def hessianstructure(self):
        return self.ev.hessian_structure()

    def intermediate(self, alg_mod, iter_count, obj_value, inf_pr, inf_du, mu,
                     d_norm, regularization_size, alpha_du, alpha_pr, ls_trials):
        if self.share is not None:
            _share_iterate(self.share, iter_count)
        if self.error is not None or self.expired:
            return False
        self.iterations = iter_count
        if self._progress is not None:
            self._progress(iter_count, obj_value, inf_pr, inf_du)
        if self._user_intermediate is not None:
            kw = dict(iter_count=iter_count, obj_value=obj_value, inf_pr=inf_pr,
                      inf_du=inf_du, mu=mu)
            if self._wants_iterate:
                kw["iterate"] = self.current_x
            try:
                r = self._user_intermediate(**kw)
            except BaseException as err:             # noqa: BLE001 - re-raised after the solve
                self.abort(err, "intermediate")
                return False
            if r is False:
                return False
        return True


    def current_x(self):
        """Ipopt's current primal iterate (unscaled), inside the intermediate callback."""
        return np.asarray(self.nlp.get_current_iterate(scaled=False)["x"], dtype=float)


def _takes(fn, name) -> bool:
    """True when ``fn`` names the parameter ``name`` (a ``**kwargs`` is not enough:
    callbacks written for the five keywords keep receiving exactly those)."""
    import inspect
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _share_iterate(share, iter_count):
    """Write Ipopt's current iterate into the shared array: ``[ready, k_0, k_1, slot_0,
    slot_1]``, each slot ``[x, z_L, z_U, g, y]``.  The slot not marked ready is written,
    then marked (one 8-byte store), so a process killed while writing leaves the
    previous iterate whole."""
    nlp, buf, n, m = share
    try:
        it = nlp.get_current_iterate(scaled=False)
    except Exception:                              # noqa: BLE001 - an older Ipopt: no iterate
        it = None
    if not it or it.get("x") is None:
        return
    slot = 0 if int(buf[0]) == 1 else 1
    at = 3 + slot * (3 * n + 2 * m)
    parts = (it["x"], it["mult_x_L"], it["mult_x_U"], it["g"], it["mult_g"])
    for v, size in zip(parts, (n, n, n, m, m)):
        if size:
            buf[at:at + size] = (np.asarray(v, dtype=float).ravel()[:size] if v is not None
                                 else 0.0)
        at += size
    buf[1 + slot] = iter_count
    buf[0] = slot


def _solve_isolated(prob, nlp, ev, run, x_start):
    """``run()`` (Ipopt's solve) in a forked child; ``(x, info)`` as cyipopt returns
    them, rebuilt from the last iterate if the child was killed at the hard limit
    or died."""
    import mmap
    import pickle
    n, m = ev.n, ev.m
    size = 3 + 2 * (3 * n + 2 * m)                # see _share_iterate
    buf = np.ndarray(size, dtype=float, buffer=mmap.mmap(-1, 8 * size))
    buf[0] = -1.0
    prob.share = (nlp, buf, n, m)

    lines = prob._progress

    def child(send=None):
        if send is not None:        # progress lines are printed by the waiting process
            prob._progress = lambda *record: send(record)
        x, info = run()
        err = prob.error
        if err is not None:
            try:
                pickle.dumps(err)
            except Exception:                      # noqa: BLE001 - an unpicklable exception
                err = RuntimeError(f"{type(err).__name__}: {err}")
        return dict(x=x, info=info, iterations=prob.iterations, eval_s=prob.eval_s,
                    counts=prob.counts, expired=prob.expired, error=err,
                    error_in=prob.error_in, stats=getattr(ev, "stats", None),
                    state=getattr(prob._user_intermediate, "state", None))

    hard = (None if prob.deadline is None else
            time.monotonic() + (prob.deadline - time.perf_counter()) + HARD_LIMIT_GRACE)
    try:
        out = run_forked(child, hard, on_message=(None if lines is None else
                                                   (lambda record: lines(*record))))
    finally:
        prob.share = None
    if out.returned:
        v = out.value
        prob.iterations, prob.eval_s = v["iterations"], v["eval_s"]
        prob.counts, prob.expired = v["counts"], v["expired"]
        if v["error"] is not None:
            prob.abort(v["error"], v["error_in"])
        if isinstance(v["stats"], dict) and isinstance(getattr(ev, "stats", None), dict):
            ev.stats.update(v["stats"])
        if v["state"] is not None:          # a fork-safe callback's record, back in this process
            prob._user_intermediate.state = v["state"]
        return v["x"], v["info"]
    if out.unsendable is not None:
        raise RuntimeError(f"the isolated Ipopt solve finished but its result could not be "
                           f"sent back: {out.unsendable}")
    slot = int(buf[0])
    k = int(buf[1 + slot]) if slot >= 0 else -1
    if slot >= 0:
        at = 3 + slot * (3 * n + 2 * m)
        x, zl, zu, g, y = (buf[a:b].copy() for a, b in zip(
            at + np.cumsum([0, n, n, n, m]), at + np.cumsum([n, n, n, m, m])))
    else:
        x = np.clip(np.asarray(x_start, dtype=float), ev.x_lb, ev.x_ub)
        zl, zu, y = np.zeros(n), np.zeros(n), np.zeros(m)
        try:
            g = np.asarray(ev.constraints(x), dtype=float) if m else np.zeros(0)
        except (EvaluationError, ArithmeticError, ValueError):
            g = np.full(m, np.nan)
    try:
        obj = float(ev.objective(x))
    except (EvaluationError, ArithmeticError, ValueError):
        obj = float("nan")
    prob.iterations = max(k, 0)
    where = (f"inside iteration {k + 1}; the values are those of iteration {k}" if k >= 0
             else "before its first iteration; the values are the start's")
    if out.timed_out:
        status = WALL_TIME_CODE
        msg = (f"Maximum wall time exceeded: Ipopt was stopped {HARD_LIMIT_GRACE:g} s after "
               f"max_wall_time, {where} (one step of compiled code that cannot be "
               f"interrupted, such as a factorization of the KKT system, ran past the limit)")
    else:
        status = -199
        msg = (f"Ipopt's process died with {out.died} {where}"
               + (" (SIGKILL from outside the package: most often the system's "
                  "out-of-memory killer; the problem may be too large for this machine's "
                  "memory: use a coarser grid)" if "SIGKILL" in str(out.died) else ""))
    return x, dict(x=x, status=status, status_msg=msg, obj_val=obj, mult_g=y, mult_x_L=zl,
                   mult_x_U=zu, g=g)


@contextlib.contextmanager
def _sigint_aborts(prob):
    """While Ipopt runs, SIGINT records a KeyboardInterrupt in ``prob`` (main thread only)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def handler(signum, frame):
        prob.abort(KeyboardInterrupt(), "Ipopt (SIGINT)")

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def _captured_stdout(out):
    """Capture what C code writes to file descriptor 1 (Ipopt's option messages)."""
    sys.stdout.flush()
    try:
        libc = ctypes.CDLL(None)          # C stdio buffers are flushed before restoring
    except OSError:                        # pragma: no cover - platforms without it
        libc = None
    if libc is not None:
        libc.fflush(None)                  # earlier output (a tee'd log) stays where it was
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            if libc is not None:
                libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def _add_options(nlp, opts):
    """Give ``opts`` to Ipopt: bools as yes/no, numpy scalars as Python numbers,
    ints retried as floats where Ipopt takes a real number."""
    msgs = []
    with _captured_stdout(msgs):
        bad = []
        for k, v in opts.items():
            if isinstance(v, (bool, np.bool_)):
                v = "yes" if v else "no"
            elif isinstance(v, (np.integer, np.floating)):
                v = v.item()
            for tried in ((v, float(v)) if isinstance(v, int) else (v,)):
                try:
                    nlp.add_option(k, tried)
                    break
                except TypeError:
                    pass
            else:
                bad.append((k, v))
    if bad:
        k, v = bad[0]
        detail = " ".join(msgs[0].split()) if msgs and msgs[0].strip() else ""
        raise ValueError(f"Ipopt option {k}={v!r} was refused"
                         + (f": {detail[:400]}" if detail else ""))


def start_value_magnitude(x0):
    """Typical magnitudes ``|x0_k|`` (1 where x0_k = 0)."""
    a = np.abs(np.asarray(x0, dtype=float).reshape(-1))
    return np.where(a > 0, a, 1.0)


def start_value_scaling(x0):
    """Scaling factors ``1/|x0_k|`` (1 where x0_k = 0): variables of very different
    magnitudes become O(1) inside Ipopt, whose Hessian regularization and step
    tests are not invariant to scaling."""
    return 1.0 / start_value_magnitude(x0)


def _positive_vector(v, n, name, fill=1.0, allow_nan=False):
    """``v`` as n positive finite floats (``fill`` when ``v`` is None); with
    ``allow_nan``, NaN entries mean "not given" and are kept."""
    if v is None:
        return np.full(n, fill)
    a = np.asarray(v, dtype=float).reshape(-1)
    ok = np.isfinite(a) & (a > 0)
    if allow_nan:
        ok |= np.isnan(a)
    if a.shape != (n,) or not np.all(ok):
        raise ValueError(f"{name} must be {n} positive finite number{'s' if n > 1 else ''}")
    return a


def _gradient_factor(gmax, max_gradient, min_value):
    """Ipopt's gradient-based factor of a row whose largest gradient entry is ``gmax``."""
    return np.where(gmax > max_gradient, np.maximum(max_gradient / np.where(gmax > 0, gmax, 1.0),
                                                    min_value), 1.0)


def gradient_based_scaling(ev, x, x_scaling, max_gradient=100.0, min_value=1e-8):
    """Ipopt's ``gradient-based`` rule, applied in the scaled variables ``x_scaling * x``.

    Objective and constraint rows whose largest gradient entry (with respect to
    the scaled variables) exceeds ``max_gradient`` are scaled down to it
    (factor ``max_gradient / max|∂/∂(s x)|``, at least ``min_value``); the
    others get 1.  Returns ``(obj_factor, g_factors)``; a point where the
    derivatives cannot be evaluated gives ones.
    """
    xs = np.asarray(x_scaling, dtype=float)
    x = np.clip(np.asarray(x, dtype=float), ev.x_lb, ev.x_ub)
    try:
        gf = np.max(np.abs(np.asarray(ev.gradient(x)) / xs), initial=0.0)
        rowmax = np.zeros(ev.m)
        if ev.m:
            rows, cols = ev.jacobian_structure()
            vals = np.abs(np.asarray(ev.jacobian(x), dtype=float)) / xs[np.asarray(cols)]
            np.maximum.at(rowmax, np.asarray(rows), vals)
    except (EvaluationError, ArithmeticError, ValueError):
        return 1.0, np.ones(ev.m)
    if not (np.isfinite(gf) and np.all(np.isfinite(rowmax))):
        return 1.0, np.ones(ev.m)
    return (float(_gradient_factor(np.array(gf), max_gradient, min_value)),
            _gradient_factor(rowmax, max_gradient, min_value))


def first_quasi_newton_scale(ev, x0, x_scaling=None, obj_factor=None, options=None):
    """``limited_memory_init_val`` σ₀ for a problem with bounds only (see docs/solver.md,
    the ``limited-memory`` item of the list at the top): the smallest σ₀ (at least 1, at
    most 1e8) for which Ipopt's first quasi-Newton step ``-∇f / σ₀`` (in its scaled
    variables) moves no variable by more than its start magnitude (1 for a start at 0).
    None where the gradient cannot be evaluated or Ipopt's default needs no change."""
    opts = options or {}
    xs = np.ones(ev.n) if x_scaling is None else np.asarray(x_scaling, dtype=float)
    x = np.clip(np.asarray(x0, dtype=float), ev.x_lb, ev.x_ub)
    try:
        g = np.asarray(ev.gradient(x), dtype=float) / xs
    except (EvaluationError, ArithmeticError, ValueError):
        return None
    if not np.all(np.isfinite(g)) or ev.n == 0:
        return None
    if obj_factor is None or not np.isfinite(obj_factor):
        obj_factor = 1.0
        if opts.get("nlp_scaling_method", "gradient-based") == "gradient-based":
            obj_factor = float(_gradient_factor(np.max(np.abs(g)),
                                                float(opts.get("nlp_scaling_max_gradient", 100.0)),
                                                float(opts.get("nlp_scaling_min_value", 1e-8))))
        obj_factor *= float(opts.get("obj_scaling_factor", 1.0))
    reach = start_value_magnitude(x) * xs                # the start magnitudes, scaled
    s0 = float(np.max(obj_factor * np.abs(g) / reach))
    return min(s0, 1e8) if s0 > 1.0 else None


_MEMORY_SIGNS = ("requires more memory", "insufficient memory", "not enough memory",
                 "memory allocation", "info(1) = -9", "info(1) = -13", "info(1) = -8")


def _memory_exhausted(log):
    """True if Ipopt's log says the linear solver ran out of memory."""
    text = (log or "").lower()
    return any(sign in text for sign in _MEMORY_SIGNS)


def _remove(path):
    if path is not None:
        with contextlib.suppress(OSError):
            os.remove(path)


MUMPS_DEFAULTS = {"mumps_pivot_order": 7}
"""MUMPS settings that :func:`solve_with_ipopt` gives Ipopt unless the options name them (or
ask for another ``linear_solver``): MUMPS's automatic ordering, as fast as the best one
and safer than PORD (see docs/solver.md, section "Linear algebra: MUMPS settings and
Ipopt builds", measured with ``benchmarks/linear_solver.py``).  The simultaneous
approach adds its own pivot tolerance (``IPOPT_DEFAULTS`` of its class)."""


def adjoint_multipliers(ev, x, decisions, rtol=1e-6):
    """Constraint multipliers ``y`` that make the Lagrangian stationary in every
    variable not in ``decisions``: ``∇_S f + J_Sᵀ y = 0`` with ``S`` the other
    variables, when the equality constraints determine them (``J_S`` square).

    At a point where a discretized ODE holds (the states simulated at the
    parameters ``decisions``) this is the discrete adjoint, which Ipopt's
    multipliers equal at a solution [GM-grad, eqs. (52), (56)-(58)].  Ipopt's own
    first estimate (a least-squares solve of its KKT system) can fail on a stiff
    problem's system (entries over ten decades: MUMPS reports a wrong inertia); Ipopt
    then starts from ``y = 0`` and its first steps, blind to the constraints'
    curvature, leave the feasible start by orders of magnitude.  A sparse LU of
    ``J_Sᵀ`` (block triangular along the grid) has no inertia to get wrong.

    ``decisions``: boolean mask over the variables.  Returns None where ``J_S`` is
    not square, has inequality rows, is singular, or the solve leaves a residual
    above ``rtol`` times the gradient.
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu
    S = ~np.asarray(decisions, dtype=bool)
    if ev.m == 0 or int(S.sum()) != ev.m or np.any(ev.g_lb != ev.g_ub):
        return None
    x = np.clip(np.asarray(x, dtype=float), ev.x_lb, ev.x_ub)
    try:
        grad = np.asarray(ev.gradient(x), dtype=float)[S]
        rows, cols = ev.jacobian_structure()
        J = sp.csc_matrix((np.asarray(ev.jacobian(x), dtype=float), (rows, cols)),
                          shape=(ev.m, ev.n))[:, S]
    except (EvaluationError, ArithmeticError, ValueError):
        return None
    if not (np.all(np.isfinite(grad)) and np.all(np.isfinite(J.data))):
        return None
    JT = J.T.tocsc()
    try:
        y = splu(JT).solve(-grad)
    except (RuntimeError, ValueError):          # singular: Ipopt's own estimate then
        return None
    if not np.all(np.isfinite(y)):
        return None
    if np.max(np.abs(JT @ y + grad), initial=0.0) > rtol * max(1.0, np.max(np.abs(grad))):
        return None
    return y


#: Ipopt's barrier parameter at a start with multipliers (the adjoint start) near
#: stationarity: small, so that the barrier does not move the decisions the data determine
#: weakly (Ipopt's default 0.1 moves such a parameter towards the middle of its box, and
#: the states with it).
WARM_MU_INIT = 1e-6

#: A start whose dual infeasibility (scaled, :func:`warm_start`) is below this is near
#: stationarity and gets the warm start's bound multipliers and barrier; a poorer one keeps
#: the cold start's (a far start of a pre-equilibrated problem led Ipopt to another local
#: minimum with the warm start's values: docs/solver.md).  Ipopt scales the objective so
#: that no gradient entry exceeds 100 (``nlp_scaling_max_gradient``).
WARM_START_MAX_INFEASIBILITY = 1.0


def warm_start(ev, x, y, of, xs, push=1e-2, frac=1e-2, mu=WARM_MU_INIT):
    """Bound multipliers ``(z_L, z_U)`` consistent with constraint multipliers ``y`` at
    ``x`` and the barrier parameter ``mu``, and the start's dual infeasibility left
    with them (in Ipopt's scaled problem: ``of`` the objective's scaling factor, ``xs``
    the variables'); None where the gradient or the Jacobian cannot be evaluated.

    The Lagrangian's gradient g = ∇f + Jᵀy (the reduced gradient in the decisions when
    ``y`` is their adjoint) is carried by the bound multipliers where a variable lies
    within Ipopt's push of its bound (``push``, ``frac``: its ``bound_push``,
    ``bound_frac``; z_L - z_U = g for the part that points out of the box), and left as
    dual infeasibility elsewhere.  Each bound multiplier adds the central value
    mu / (of · s), s the distance to its bound after the push."""
    import scipy.sparse as sp
    try:
        rows, cols = ev.jacobian_structure()
        J = sp.csr_matrix((np.asarray(ev.jacobian(x), dtype=float), (rows, cols)),
                          shape=(ev.m, ev.n))
        g = np.asarray(ev.gradient(x), dtype=float) + J.T @ np.asarray(y, dtype=float)
    except (EvaluationError, ArithmeticError, ValueError):
        return None
    if not np.all(np.isfinite(g)):
        return None
    lb, ub = np.asarray(ev.x_lb, dtype=float), np.asarray(ev.x_ub, dtype=float)
    with np.errstate(invalid="ignore"):
        width = np.where(np.isfinite(lb) & np.isfinite(ub), ub - lb, np.inf)
        p_l = np.minimum(push * np.maximum(1.0, np.abs(lb)), frac * width)
        p_u = np.minimum(push * np.maximum(1.0, np.abs(ub)), frac * width)
        near_l, near_u = np.isfinite(lb) & (x - lb <= p_l), np.isfinite(ub) & (ub - x <= p_u)
        held_l = np.where(near_l, np.maximum(g, 0.0), 0.0)
        held_u = np.where(near_u, np.maximum(-g, 0.0), 0.0)
        infeasibility = float(np.max(of * np.abs(g - held_l + held_u) / xs, initial=0.0))
        s_l, s_u = np.maximum(x - lb, p_l), np.maximum(ub - x, p_u)
        zl = np.where(np.isfinite(lb), held_l + mu / (of * s_l), 0.0)
        zu = np.where(np.isfinite(ub), held_u + mu / (of * s_u), 0.0)
    return zl, zu, infeasibility


def solve_with_ipopt(ev, x0=None, options=None, tee=False, intermediate=None, x_scaling=None,
                     g_scaling=None, obj_scaling=None, progress=None, max_wall_time=None,
                     multipliers=None, isolate=None):
    """Solve the evaluator's NLP with Ipopt; return an :class:`IpoptResult`.

    ``options`` are passed to Ipopt unchanged, after :data:`MUMPS_DEFAULTS` for
    the MUMPS settings they do not name.  With ``tee=False`` Ipopt is
    silent (``print_level=0``) unless the options set ``print_level``.
    ``x_scaling`` (length n), ``g_scaling`` (length m), ``obj_scaling``
    (scalar): user scaling (``nlp_scaling_method=user-scaling`` unless the
    options say otherwise); factors not given (None, or NaN entries) follow
    Ipopt's gradient-based rule in the scaled variables
    (:func:`gradient_based_scaling`; see docs/solver.md, section "User
    scaling").  Multipliers and values returned are those of the unscaled problem.

    ``progress``: one line on standard error per block of iterations
    (iteration, objective, inf_pr, inf_du, elapsed seconds; :class:`~pyomo_odeest.nlp._progress.IterationProgress`)
    — None (default): when standard error is a terminal and Ipopt's own log
    (``tee``) is off; True / False; an int: lines every that many iterations.
    ``max_wall_time``: seconds, Ipopt's ``max_wall_time`` (status
    ``Maximum_WallTime_Exceeded`` when it is reached).  Inside a
    :func:`~pyomo_odeest.nlp._progress.solve_scope` its deadline bounds the limit
    and ``progress=None`` means the scope's setting.

    ``multipliers``: the constraint multipliers (length m) to start from instead of
    Ipopt's own estimate (e.g. :func:`adjoint_multipliers`): Ipopt's warm start
    (``warm_start_init_point``) with the bound pushes of its cold start, without Ipopt's
    cap on their size (``warm_start_mult_init_max``, 1e6 in the scaled problem: an
    adjoint of a stiff problem exceeds it, and a clipped one is no longer stationary),
    with bound multipliers consistent with them (:func:`warm_start`) and ``mu_init`` =
    :data:`WARM_MU_INIT` at a start near stationarity (its scaled dual infeasibility
    below :data:`WARM_START_MAX_INFEASIBILITY`); options that name ``mu_init`` or
    ``bound_mult_init_val`` get the cold start's bound multipliers instead.

    ``isolate``: run Ipopt in a process forked from this one
    (:func:`~pyomo_odeest.nlp._forked.run_forked`, Linux), killed if it is still
    running :data:`HARD_LIMIT_GRACE` seconds after ``max_wall_time``.  Ipopt checks
    its limit between iterations, and the evaluations past it are refused, but one
    factorization of a large KKT system (MUMPS asking for more memory again and
    again) cannot be stopped inside the process: killed, the solve returns status
    ``Maximum_WallTime_Exceeded`` with Ipopt's last iterate (primal values,
    multipliers and constraint values of the last iteration it finished).  None
    (default): isolated when there is a time limit, no ``intermediate`` callback
    (its side effects would stay in the child) or one that says it may run there
    (``intermediate.forkable``; its ``state`` attribute is sent back), and the
    evaluator says a solve may run in another process (``ev.forkable``, true for
    :class:`PyomoNLPEvaluator`).

    ``intermediate``: called each iteration with the keywords ``iter_count,
    obj_value, inf_pr, inf_du, mu`` (and ``iterate``, a function returning Ipopt's
    current primal iterate, when it names that parameter); returning False stops
    Ipopt (``User_Requested_Stop``).
    """
    cyipopt = import_cyipopt()
    if multipliers is not None:
        multipliers = np.asarray(multipliers, dtype=float)
        if multipliers.shape != (ev.m,) or not np.all(np.isfinite(multipliers)):
            raise ValueError(f"multipliers must be {ev.m} finite values, one per constraint "
                             f"row; got shape {multipliers.shape}")
    show = progress_enabled(progress) and not tee
    every = progress if (not isinstance(progress, bool) and isinstance(progress, int)
                         and progress > 1) else 10
    lines = IterationProgress("ipopt", every) if show else None
    prob = _Problem(ev, cyipopt, intermediate, lines)
    lb, ub, cl, cu = (np.where(np.isfinite(b), b, big) for b, big in
                      ((ev.x_lb, -1e20), (ev.x_ub, 1e20), (ev.g_lb, -1e20), (ev.g_ub, 1e20)))
    nlp = cyipopt.Problem(n=ev.n, m=ev.m, problem_obj=prob, lb=lb, ub=ub, cl=cl, cu=cu)
    prob.nlp = nlp
    opts = dict(options or {})
    if max_wall_time is not None:
        if not (isinstance(max_wall_time, (int, float)) and max_wall_time > 0):
            raise ValueError(f"max_wall_time must be a positive number of seconds, got "
                             f"{max_wall_time!r}")
        opts["max_wall_time"] = float(max_wall_time)
    left = time_left(opts.get("max_wall_time"))      # bounded by an open solve scope's deadline
    if left is not None:
        opts["max_wall_time"] = max(left, 1e-9)
    if str(opts.get("linear_solver", "mumps")).lower() == "mumps":
        for k, v in MUMPS_DEFAULTS.items():
            opts.setdefault(k, v)
    user_obj_factor, user_xs = None, None
    if x_scaling is not None or g_scaling is not None or obj_scaling is not None:
        xs = _positive_vector(x_scaling, ev.n, "x_scaling")
        gs = _positive_vector(g_scaling, ev.m, "g_scaling", np.nan, allow_nan=True)
        os_ = _positive_vector(obj_scaling, 1, "obj_scaling", np.nan, allow_nan=True)
        if np.isnan(os_[0]) or np.isnan(gs).any():
            of, gf = gradient_based_scaling(
                ev, ev.x0 if x0 is None else x0, xs,
                float(opts.get("nlp_scaling_max_gradient", 100.0)),
                float(opts.get("nlp_scaling_min_value", 1e-8)))
            os_ = np.where(np.isnan(os_), of, os_)
            gs = np.where(np.isnan(gs), gf, gs)
        nlp.set_problem_scaling(obj_scaling=float(os_[0]), x_scaling=xs,
                                g_scaling=gs if ev.m else None)
        opts.setdefault("nlp_scaling_method", "user-scaling")
        if opts["nlp_scaling_method"] == "user-scaling":
            user_obj_factor, user_xs = float(os_[0]), xs
    if (ev.m == 0 and str(opts.get("hessian_approximation", "")) == "limited-memory"
            and "limited_memory_init_val" not in opts):
        s0 = first_quasi_newton_scale(ev, ev.x0 if x0 is None else x0, user_xs,
                                      user_obj_factor, opts)
        if s0 is not None:
            opts["limited_memory_init_val"] = s0
    if not tee:
        opts.setdefault("print_level", 0)
    opts.setdefault("sb", "yes")
    log = None
    if "output_file" not in opts:
        # Ipopt's warnings (MUMPS asking for memory) go to a file read after the solve
        fd, log = tempfile.mkstemp(prefix="odeest_ipopt_", suffix=".log")
        os.close(fd)
        opts["output_file"] = log
        opts["file_print_level"] = 4
    try:
        _add_options(nlp, opts)
    except ValueError:
        nlp.close()
        _remove(log)
        raise
    x_start = ev.x0 if x0 is None else np.asarray(x0, dtype=float)
    if multipliers is not None:
        # Ipopt clips warm-start multipliers above warm_start_mult_init_max (default 1e6, in
        # the scaled problem), which makes an adjoint of a stiff problem inconsistent
        warm = {"warm_start_init_point": "yes", "warm_start_mult_init_max": 1e300}
        for k in ("bound_push", "bound_frac", "slack_bound_push", "slack_bound_frac"):
            warm["warm_start_" + k] = float(opts.get(k, 1e-2))
        for k, v in warm.items():
            if k not in opts:
                nlp.add_option(k, v)
        # the bound multipliers of the cold start: bound_mult_init_val in the scaled
        # problem, z = z_scaled * x_scaling / obj_scaling unscaled
        if user_xs is not None:
            xs, of = user_xs, user_obj_factor
        else:
            xs = np.ones(ev.n)
            of = (gradient_based_scaling(ev, x_start, xs,
                                         float(opts.get("nlp_scaling_max_gradient", 100.0)),
                                         float(opts.get("nlp_scaling_min_value", 1e-8)))[0]
                  if opts.get("nlp_scaling_method", "gradient-based") == "gradient-based"
                  else 1.0)
        of = of * float(opts.get("obj_scaling_factor", 1.0))
        bound_z = None
        if WARM_MU_INIT is not None and not {"mu_init", "bound_mult_init_val"} & set(opts):
            near = warm_start(ev, x_start, multipliers, of, xs,
                              float(opts.get("bound_push", 1e-2)),
                              float(opts.get("bound_frac", 1e-2)), mu=WARM_MU_INIT)
            if near is not None and near[2] < WARM_START_MAX_INFEASIBILITY:
                bound_z = near[:2]
                nlp.add_option("mu_init", WARM_MU_INIT)
        if bound_z is None:            # the cold start's: bound_mult_init_val, scaled
            z0 = float(opts.get("bound_mult_init_val", 1.0)) * xs / of
            bound_z = (np.where(np.isfinite(ev.x_lb), z0, 0.0),
                       np.where(np.isfinite(ev.x_ub), z0, 0.0))
    start_kw = ({} if multipliers is None else
                dict(lagrange=multipliers, zl=bound_z[0], zu=bound_z[1]))

    if ev.n >= RELEASE_MEMORY_MIN_VARIABLES:
        release_free_memory()

    def run():
        try:
            with _sigint_aborts(prob):
                return nlp.solve(x_start, **start_kw)
        except BaseException as err:                 # noqa: BLE001 - cyipopt re-raising
            prob.abort(err, "cyipopt")
            return None, None

    t = time.perf_counter()
    if opts.get("max_wall_time") is not None:
        prob.deadline = t + float(opts["max_wall_time"])
    if isolate is None:
        isolate = (prob.deadline is not None
                   and (intermediate is None or getattr(intermediate, "forkable", False))
                   and bool(getattr(ev, "forkable", False)))
    try:
        if isolate and CAN_FORK:
            x, info = _solve_isolated(prob, nlp, ev, run, x_start)
        else:
            x, info = run()
    finally:
        nlp.close()
        if ev.n >= RELEASE_MEMORY_MIN_VARIABLES:
            release_free_memory()          # Ipopt's and MUMPS's, before the post-solve work
    ipopt_s = time.perf_counter() - t
    ipopt_log = ""
    if log is not None:
        with contextlib.suppress(OSError), open(log, errors="replace") as f:
            ipopt_log = f.read()
    _remove(log)
    if prob.error is not None:
        # an exception in a callback (or Ctrl-C) stopped Ipopt: nothing is returned
        if isinstance(prob.error, MemoryError):
            raise MemoryError(f"the machine ran out of memory while evaluating the NLP "
                              f"({ev.n} variables, {ev.m} constraints) in "
                              f"{prob.error_in} ({prob.error or 'no message'}): the problem is "
                              "too large for this memory; use a coarser grid or fewer "
                              "variables") from prob.error
        raise prob.error
    status = int(info["status"])
    msg = info["status_msg"]
    if isinstance(msg, bytes):
        msg = msg.decode(errors="replace")
    if prob.expired and status not in (0, 1):      # stopped by the deadline between checks
        status = WALL_TIME_CODE
        msg = (f"Maximum wall time exceeded: evaluations stopped {ipopt_s:.3g} s after the "
               f"start (max_wall_time={float(opts['max_wall_time']):g})")
    if status == -13 and hasattr(ev, "nonfinite_components"):     # Invalid_Number_Detected
        names = ev.nonfinite_components(np.clip(x_start, ev.x_lb, ev.x_ub))
        if names:
            msg += (f" Not finite at the start point: {', '.join(names)}; start from a point "
                    "where they can be evaluated (for example inside the domain of log, sqrt "
                    "or a division)")
    elif status == -102 or (status in (-2, -3, -100, -199) and _memory_exhausted(ipopt_log)):
        msg += (" Ipopt ran out of memory (the linear solver could not allocate its "
                "factorization): the problem is too large for this machine's memory; use a "
                "coarser grid, fewer variables, or more memory")
    if lines is not None:
        lines.finish(IPOPT_STATUS.get(status, f"status_{status}"))
    return IpoptResult(
        x=np.asarray(x), obj=float(info["obj_val"]), mult_g=np.asarray(info["mult_g"]),
        mult_x_L=np.asarray(info["mult_x_L"]), mult_x_U=np.asarray(info["mult_x_U"]),
        g=np.asarray(info["g"]), status=status,
        status_name=IPOPT_STATUS.get(status, f"status_{status}"), message=msg,
        iterations=prob.iterations, eval_s=prob.eval_s, ipopt_s=ipopt_s,
        counts=dict(prob.counts))
