r"""The backends of the results: the model of an approach behind the analyses.

Every backend implements one small protocol, used by the covariance, profiles,
identifiability, prediction bands, bootstrap, the post-solve checks and
:func:`~pyomo_odeest.analysis.compare_approaches` (which never look at the
approach's name):

* ``problem`` — the :class:`~pyomo_odeest.EstimationProblem`;
* ``simulate(u)`` — the states on the backend's time points (a trajectory per
  experiment for several);
* ``observation_sensitivities(u, free)`` — per experiment ``(problem, S,
  residuals, misfit)``: :math:`S_j = \mathrm dz(\tau_j)/\mathrm du_{\text{free}}`,
  the masked residuals and the :class:`~pyomo_odeest.problem._misfit.MeasurementMisfit`;
* ``hessian(u, free)`` — the exact Hessian of J over the free parameters,
  ``gauss_newton(u, free)`` its Gauss–Newton matrix;
* ``discretization`` — ``dict(scheme=, qmax=, grid=)`` of the discretization
  (empty for the continuous ODE), ``discrete_model`` — a
  :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` on it (the
  default discretization for the continuous ODE), ``source`` — a label.

Re-optimizing (profiles, bootstrap) is not the backend's: a result is estimated
again through its own approach and options as solved
(:meth:`~pyomo_odeest.EstimationResult.refit`).

:class:`DiscreteBackend` (reduced space, and a rebuilt backend), :class:`KKTBackend`
(simultaneous: the KKT system at the solution), :class:`ShootingBackend`
(multiple shooting: the null space of its continuity constraints) and
:class:`ContinuousBackend` (the continuous ODE).

A backend pickles as the data that build it again (``__reduce__``: the problem,
each experiment's scheme and grid, the shooting nodes and node values, the
integrator's settings, the KKT system's sensitivities and reduced Hessian), so
that its analyses after unpickling are those of the original; a result keeps
that recipe (:meth:`~pyomo_odeest.EstimationResult.lean`) and builds the backend
from it on first use.  A result's JSON form keeps the same data
(:func:`backend_data`: the problems as their places in the result's problem), so
that a result read from JSON builds the original's backend too
(:func:`backend_from_data`); :func:`rebuild_backend` makes one for a result without
(a JSON file written before it kept them) from its problem, scheme and grid.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..discretization._experiments import (ExperimentModels, experiment_grid, experiment_models,
                                           join_experiments)
from ..discretization._grid import Grid
from ..discretization.discrete import DiscreteModel
from ..discretization.schemes import MultistepScheme, get_scheme
from ..problem._declaration import EstimationProblem
from ..problem._misfit import MeasurementMisfit
from ..transcription._initialize import blocks_of

__all__ = ["DiscreteBackend", "KKTBackend", "ShootingBackend", "ContinuousBackend",
           "rebuild_backend", "backend_data", "backend_from_data", "kkt_reduced_hessian",
           "discrete_model"]


def _observed(problem, mf, Xm, u, Xs, free):
    """One experiment's ``(problem, S, masked residuals, misfit)`` from the states ``Xm``
    at its measurement times and their sensitivities ``Xs`` over all parameters."""
    return (problem, mf.observation_sensitivities(Xm, u, Xs)[:, :, free],
            mf.residuals(Xm, u) * problem.mask, mf)


def discrete_model(problem, scheme="adams_pc", qmax=None, grid=None, max_step=None,
                   steps_per_interval=None):
    """The :class:`DiscreteModel` of ``problem``; for several experiments the
    :class:`~pyomo_odeest.discretization._experiments.ExperimentModels` sum of one
    per experiment (``grid``: a mapping experiment -> Grid, or None)."""
    return join_experiments(problem, [
        DiscreteModel(sp_, scheme, qmax, experiment_grid(grid, name), max_step,
                      steps_per_interval)
        for name, sp_ in zip(problem.experiment_names or [None], problem.subproblems)])


class DiscreteBackend:
    """A :class:`DiscreteModel` (several experiments: their sum): discrete
    sensitivities and second-order adjoint [GM-grad, (51), §2.5]."""

    def __init__(self, problem, dm, source=None):
        self.problem, self.discrete_model = problem, dm
        self.source = source or "discrete sensitivities / second-order adjoint [GM-grad, (51), §2.5]"

    def __reduce__(self):
        return _discrete_backend, (self.problem, _model_parts(self.discrete_model), self.source)

    @property
    def discretization(self):
        ms = experiment_models(self.discrete_model)
        grid = ({n: m.grid for n, m in zip(self.problem.experiment_names, ms)} or ms[0].grid)
        return dict(scheme=ms[0].scheme.name, qmax=ms[0].scheme.qmax, grid=grid)

    def simulate(self, u):
        return self.discrete_model.simulate(u)

    def observation_sensitivities(self, u, free):
        out = []
        for sp_, dm in zip(self.problem.subproblems, experiment_models(self.discrete_model)):
            traj = dm.simulate(u)
            J = np.asarray(dm.grid.J)
            Xm, Xs = traj.X[J], dm.state_sensitivities(traj)[J]
            out.append(_observed(sp_, dm.misfit, Xm, u, Xs, free))
        return out

    def hessian(self, u, free, method="soa"):
        H = sum(np.asarray(dm.hessian(u, method), dtype=float)
                for dm in experiment_models(self.discrete_model))
        return H[np.ix_(free, free)]

    def gauss_newton(self, u, free):
        return self.hessian(u, free, "gauss_newton")


class KKTBackend(DiscreteBackend):
    r"""A solved simultaneous model: sensitivities and the reduced Hessian
    :math:`Z^\top W Z` from its KKT system (:func:`kkt_reduced_hessian`).

    The system is formed once, at the solution; a pickled backend carries it
    (the states and their sensitivities at the measurement times, the reduced
    Hessian: the Pyomo model itself is not pickled) with the discrete models of
    the blocks' schemes and grids."""

    def __init__(self, problem, model, dm=None, system=None, evaluator=None):
        super().__init__(problem, _scheme_models(problem, blocks_of(model.est))
                         if dm is None else dm,
                         "KKT system of the simultaneous NLP (reduced Hessian Z^T W Z)")
        self.model = model
        self._kkt = system
        # the solve's evaluator of ``model``: forms the system once, then let go
        self._evaluator = evaluator

    def __reduce__(self):
        # the system is formed here if no analysis formed it (the post-solve checks do)
        try:
            system = self._system()
        except Exception as err:             # noqa: BLE001 - raised again where it is used
            system = err if isinstance(err, (ValueError, RuntimeError)) else RuntimeError(
                f"the KKT system of the solution could not be formed: {err}")
        return _kkt_backend, (self.problem, _model_parts(self.discrete_model), system)

    def _system(self):
        """``(names, H, [(Xm, Xs)])``: the free parameters of the model, the reduced
        Hessian over them and per experiment the states at its measurement times and
        their sensitivities (an error met forming it is raised again at each use)."""
        if self._kkt is None:
            try:
                self._kkt = _kkt_system(self.problem, self.model, self._evaluator)
            except (ValueError, RuntimeError, ArithmeticError, np.linalg.LinAlgError) as err:
                self._kkt = err
            self._evaluator = None
        if isinstance(self._kkt, Exception):
            raise self._kkt.with_traceback(None)
        return self._kkt

    def _free_system(self, free):
        names, H, parts = self._system()
        want = [self.problem.parameter_names[k] for k in free]
        if names != want:
            raise ValueError(f"free parameters of the model {names} differ from the "
                             f"problem's {want}")
        return H, parts

    def observation_sensitivities(self, u, free):
        _, parts = self._free_system(free)
        out = []
        for sp_, (Xm, dX) in zip(self.problem.subproblems, parts):
            Xs = np.zeros(Xm.shape + (len(u),))
            Xs[:, :, free] = dX
            out.append(_observed(sp_, MeasurementMisfit(sp_), Xm, u, Xs, free))
        return out

    def hessian(self, u, free, method="soa"):
        if method != "soa":
            return super().hessian(u, free, method)
        return self._free_system(free)[0]


def _kkt_backend(problem, parts, system):
    """A :class:`KKTBackend` from its discrete models' parts and its KKT system (unpickling)."""
    return KKTBackend(problem, None, _discrete_models(problem, parts), system)


def _kkt_system(problem, model, evaluator=None):
    """:meth:`KKTBackend._system` of a solved simultaneous ``model``."""
    H, dwdu, names, _ = kkt_reduced_hessian(model, evaluator=evaluator)
    parts = []
    for sp_, b, d in zip(problem.subproblems, blocks_of(model.est),
                         dwdu if isinstance(dwdu, list) else [dwdu]):
        J = np.asarray(b.grid.J)
        Xm = np.array([[float(b.x[i, s].value) for s in sp_.states] for i in J], dtype=float)
        dX = np.array([[d[(i, s)] for s in sp_.states] for i in J], dtype=float)
        parts.append((Xm, dX.reshape(len(J), len(sp_.states), len(names))))
    return names, H, parts


def _scheme_models(problem, parts, grids=None):
    """The :class:`DiscreteModel` on the scheme and grid (or ``grids``) of each
    experiment's ``part``."""
    grids = grids or [p.grid for p in parts]
    return join_experiments(problem, [DiscreteModel(sp_, p.scheme.name, p.scheme.qmax, g)
                                      for sp_, p, g in zip(problem.subproblems, parts, grids)])


def _model_parts(dm):
    """What builds the experiments' discrete models of ``dm`` again: ``(problem,
    scheme, grid, engine)`` of each (the scheme and the grid, restarts included, are
    the discretization [GM-grad, eq. (2)])."""
    return [(m.problem, m.scheme, m.grid, m._engine_request) for m in experiment_models(dm)]


def _discrete_models(problem, parts):
    """The discrete models of :func:`_model_parts`, joined."""
    return join_experiments(problem, [DiscreteModel(p, s, grid=g, engine=e)
                                      for p, s, g, e in parts])


def _discrete_backend(problem, parts, source):
    """A :class:`DiscreteBackend` from :func:`_model_parts` (unpickling)."""
    return DiscreteBackend(problem, _discrete_models(problem, parts), source)


class ShootingBackend(DiscreteBackend):
    """Multiple shooting at its solution: sensitivities from the null space of the
    continuity constraints, the Hessian by central differences of the reduced
    gradient; single shooting on the same grids where a measurement lies between
    nodes, and for several experiments, its order ramp restarting at every node as
    the intervals' do [AT, eq. (2)] (the same discrete trajectories where the
    continuity constraints hold).  Pickled as its interval models' problem, scheme,
    grid and nodes with the node values."""

    def __init__(self, problem, interval_models, node_values):
        self.ims, self.nodes = list(interval_models), list(node_values)
        super().__init__(problem, _scheme_models(problem, self.ims,
                                                 [_restarting_at_nodes(im) for im in self.ims]),
                         "discrete sensitivities (single shooting on the same grid)")
        self._nlp = None
        if not problem.experiments:
            from ._shooting import MultipleShootingNLP
            self._nlp = MultipleShootingNLP(problem, self.ims[0], "vector", "sensitivity",
                                            problem.u0, self.nodes[0])
            self.source = ("multiple-shooting constraint Jacobian (null space); Hessian by "
                           "central differences of the reduced gradient")

    def __reduce__(self):
        return _shooting_backend, (self.problem, [(im.problem, im.scheme, im.grid, im.nodes)
                                                  for im in self.ims], self.nodes)

    def _usable(self):
        """The shooting NLP, or None (single shooting) when a measurement lies between nodes."""
        if self._nlp is not None and self._nlp.off_meas:      # said by the source
            self._nlp = None
            self.source = ("discrete sensitivities (single shooting on the same grid: "
                           "measurement times between the nodes)")
        return self._nlp

    def _null(self, u):
        nlp = self._nlp
        nlp.u_full = np.asarray(u, dtype=float).copy()
        x = np.concatenate([self.nodes[0].ravel(), u[nlp.free]])
        dep = np.setdiff1d(np.arange(nlp.ns), np.flatnonzero(nlp.x_lb == nlp.x_ub))
        return x, np.arange(nlp.ns, nlp.n), dep

    def observation_sensitivities(self, u, free):
        if self._usable() is None:
            return super().observation_sensitivities(u, free)
        nlp, P, S0 = self._nlp, self.problem, self.nodes[0]
        x, par, dep = self._null(u)
        Jc, lu = _factor(nlp, x, dep)
        D = -lu.solve(Jc[:, par].toarray())
        dS = np.zeros((nlp.ns, len(par)))
        dS[dep] = D
        dS = dS.reshape(nlp.N + 1, nlp.nx, len(par))
        Xm = np.empty((len(P.meas_times), nlp.nx))
        Xs = np.zeros((len(P.meas_times), nlp.nx, len(u)))
        for j, a in nlp.node_meas:
            Xm[j] = S0[a]
            Xs[j][:, free] = dS[a]
        return [_observed(P, MeasurementMisfit(P), Xm, u, Xs, free)]

    def hessian(self, u, free, method="soa"):
        if method != "soa" or self._usable() is None:
            return super().hessian(u, free, method)
        x, par, dep = self._null(u)
        return _shooting_hessian(self._nlp, x, dep, par)


def _restarting_at_nodes(im):
    """The grid of interval models ``im`` with the order ramp restarting at each interior
    node too: single shooting on it integrates every interval as ``im`` does."""
    g = im.grid
    return Grid(t=g.t, meas_times=g.meas_times, I=g.I, J=g.J,
                restarts=tuple(g.restarts) + tuple(int(i) for i in im.node_index[1:-1]))


def _shooting_backend(problem, parts, node_values):
    """A :class:`ShootingBackend` from its interval models' parts and node values
    (unpickling)."""
    from ._shooting import IntervalModels
    return ShootingBackend(problem, [IntervalModels(*p) for p in parts], node_values)


class ContinuousBackend:
    """The continuous ODE (:class:`~pyomo_odeest.approaches.ContinuousModel`, one per
    experiment): continuous sensitivities and second-order adjoint [MHV, (8),
    (19)-(20)]; bands and plots on the default discretization."""

    discretization = {}
    source = "continuous sensitivities / second-order adjoint [MHV, (8), (19)-(20)]"

    def __init__(self, problem, cm):
        self.problem, self.model = problem, cm
        self._dm = None

    def __reduce__(self):
        return _continuous_backend, (self.problem, [(type(m), m.problem, m.settings)
                                                    for m in experiment_models(self.model)])

    @property
    def discrete_model(self):
        if self._dm is None:
            self._dm = discrete_model(self.problem)
        return self._dm

    def simulate(self, u):
        return [m.simulate(u, m.tau) for m in experiment_models(self.model)]

    def observation_sensitivities(self, u, free):
        out = []
        V = np.eye(len(u))[:, free]               # the free directions only
        for sp_, c in zip(self.problem.subproblems, experiment_models(self.model)):
            _, Xm, Xs = c.sensitivities(u, V)
            mf = c.misfit
            out.append((sp_, mf.observation_sensitivities(Xm, u, Xs, free),
                        mf.residuals(Xm, u) * sp_.mask, mf))
        return out

    def hessian(self, u, free, method="soa"):
        H = sum(np.asarray(c.hessian(u, method, index=free), dtype=float)
                for c in experiment_models(self.model))
        return 0.5 * (H + H.T)

    def gauss_newton(self, u, free):
        return DiscreteBackend(self.problem, self.discrete_model).gauss_newton(u, free)

    def adjoint_frame(self, u, states=None):
        r""":math:`\lambda(t^-)` of every experiment at ``u`` [MHV, eqs. (15)–(16)], stacked
        as a result's ``adjoint``: at the times of ``states`` (a result's frame) on the
        SciPy engine, at :math:`t_0` and the measurement times on CVODES (which keeps no
        adjoint trajectory: each reported time is one more restart).  None where a
        sweep fails (the states are the result's, the adjoint is a diagnostic)."""
        from ..nlp._protocol import EvaluationError
        from ..problem._result import stack_experiments
        from ._continuous import _guarded
        names = self.problem.experiment_names
        frames = []
        for k, m in enumerate(experiment_models(self.model)):
            times = np.union1d([m.t0], m.tau)
            if getattr(m, "engine", "scipy") == "scipy" and states is not None:
                times = (states.loc[names[k]] if names else states).index.to_numpy(float)
            try:
                frames.append(_guarded(lambda: m.adjoint(u, times=times)["lambda"]))
            except EvaluationError:
                return None
        return stack_experiments(names, frames)


def _continuous_backend(problem, parts, joined=None):
    """A :class:`ContinuousBackend` from its models' classes, problems and settings
    (unpickling).  ``joined``, the class of the experiments' sum, is what data written
    by earlier versions hold: the sum is :class:`ExperimentModels` whatever it says."""
    return ContinuousBackend(problem, join_experiments(
        problem, [cls(p, **settings) for cls, p, settings in parts]))


# -- the data of a backend in a result's JSON form ----------------------------------------
#: The functions that build a backend from the arguments of its ``__reduce__``.
_BUILDERS = {f.__name__: f for f in (_discrete_backend, _kkt_backend, _shooting_backend,
                                     _continuous_backend)}
#: The errors a KKT system may hold (raised again where the system is used).
_ERRORS = {e.__name__: e for e in (ValueError, RuntimeError, ArithmeticError)}


def _model_classes():
    """The model classes the data of a continuous backend name."""
    from ..discretization.continuous import ContinuousModel, CvodesModel
    return {c.__name__: c for c in (ContinuousModel, CvodesModel, ExperimentModels)}


class _NotData(TypeError):
    """Something in a backend's recipe that its JSON data cannot hold."""


def backend_data(problem, recipe):
    """The recipe ``(build, args)`` of a backend (its ``__reduce__``) as plain data for
    a result's JSON form, or None when it holds something else (a backend of another
    kind, a problem that is not ``problem`` or one of its experiments' problems).

    Each problem becomes its place in ``[problem, *problem.subproblems]``, a scheme its
    name and ``qmax``, a grid its arrays, a model class its name and an error met
    forming a KKT system its type and message; arrays, numbers, strings and
    containers stay (:meth:`~pyomo_odeest.EstimationResult.to_json` writes them
    exactly)."""
    build, args = recipe
    if _BUILDERS.get(getattr(build, "__name__", None)) is not build:
        return None
    problems = [problem, *problem.subproblems]
    names = {c: n for n, c in _model_classes().items()}

    def enc(v):
        if isinstance(v, EstimationProblem):
            k = next((k for k, q in enumerate(problems) if q is v), None)
            if k is None:
                raise _NotData("a problem other than the result's")
            return {"__problem__": k}
        if isinstance(v, MultistepScheme):
            return {"__scheme__": [v.name, v.qmax]}
        if isinstance(v, Grid):
            return {"__grid__": [np.asarray(v.t), np.asarray(v.meas_times), np.asarray(v.I),
                                 np.asarray(v.J), [int(r) for r in v.restarts]]}
        if isinstance(v, Exception):
            kind = next((n for n, e in _ERRORS.items() if isinstance(v, e)), "RuntimeError")
            return {"__error__": [kind, str(v)]}
        if isinstance(v, type):
            if v not in names:
                raise _NotData(f"the class {v.__name__}")
            return {"__class__": names[v]}
        if isinstance(v, (list, tuple)):
            return type(v)(enc(a) for a in v)
        if isinstance(v, dict):
            return {k: enc(a) for k, a in v.items()}
        if v is None or isinstance(v, (str, bool, int, float, np.generic, np.ndarray)):
            return v
        raise _NotData(type(v).__name__)

    try:
        return {"build": build.__name__, "args": enc(args)}
    except _NotData:
        return None


def backend_from_data(problem, data):
    """The backend that :func:`backend_data` describes, built on ``problem`` (the
    result's problem, or one built again as the original).  Raises ValueError when
    the data are not such a description or do not fit ``problem``."""
    problems = [problem, *problem.subproblems]
    classes = _model_classes()

    def dec(v):
        if isinstance(v, dict):
            tag = next(iter(v), None) if len(v) == 1 else None
            a = v.get(tag)
            if tag == "__problem__":
                return problems[a]
            if tag == "__scheme__":
                return get_scheme(a[0], a[1])
            if tag == "__grid__":
                t, tau, I, J, restarts = a
                return Grid(t=np.asarray(t, dtype=float), meas_times=np.asarray(tau, dtype=float),
                            I=np.asarray(I, dtype=int), J=np.asarray(J, dtype=int),
                            restarts=tuple(int(r) for r in restarts))
            if tag == "__error__":
                return _ERRORS.get(a[0], RuntimeError)(a[1])
            if tag == "__class__":
                return classes[a]
            return {k: dec(b) for k, b in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(dec(a) for a in v)
        return v

    try:
        return _BUILDERS[data["build"]](*dec(data["args"]))
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ValueError(f"the backend data of this result do not build a backend of its "
                         f"problem ({type(err).__name__}: {err}); is it the problem the "
                         f"result was estimated with?") from None


def rebuild_backend(result, data=None, read=False):
    """The backend of a result without one (a pickled result carries the recipe of its
    own): built from ``data`` (:func:`backend_data`, which the JSON form keeps) when
    given, the original's; else the continuous ODE of its integrator settings when the
    result has no scheme, or the discrete model of its scheme and grid (the default
    grid when the grid is not known).  For a result ``read`` from a JSON file written
    without the data, that is an approximation of the original's backend (multiple
    shooting's node values, the simultaneous approach's KKT system, the adaptive
    approach's default-grid model, the grid): a warning says so, also put in
    ``result.warnings``."""
    P = result.problem
    if P is None:
        raise ValueError(f"cannot find the EstimationProblem of this {result.approach!r} "
                         f"result; pass problem=... explicitly")
    if data is not None:
        return backend_from_data(P, data)
    if result.scheme is None:
        from ..discretization.continuous import continuous_model
        kw = dict(result.extra.get("integrator") or {})
        engine = kw.get("engine")
        engine = engine if engine in ("cvodes", "scipy") else None   # the installed default
        cms = [continuous_model(sp_, engine, method=kw.get("method"), rtol=kw.get("rtol"),
                                atol=kw.get("atol")) for sp_ in P.subproblems]
        return ContinuousBackend(P, join_experiments(P, cms))
    grid = result.grid
    if P.experiments and not isinstance(grid, Mapping):
        grid = None
    dm = discrete_model(P, result.scheme.name, result.scheme.qmax, grid)
    if not read:
        return DiscreteBackend(P, dm)
    note = (f"the analyses of this {result.approach!r} result read from JSON approximate "
            f"the original's: its file does not keep the data that build the original's "
            f"backend (the 'backend' entry that to_json writes), so the backend is rebuilt "
            f"from the scheme {result.scheme_label} and "
            f"{'the default grid' if grid is None else 'the grid'}")
    warnings.warn(note, stacklevel=3)
    if note not in result.warnings:
        result.warnings.append(note)
    return DiscreteBackend(P, dm, "discrete sensitivities / second-order adjoint on the "
                           "scheme of the result (rebuilt: an approximation of the original's)")


def _factor(ev, x, dep, rows=None):
    """``(J, lu)``: the sparse constraint Jacobian of evaluator ``ev`` at ``x`` (its
    ``rows``; None: all) and the LU of its columns ``dep`` (the null space of J has the
    state part D = −J_dep⁻¹ J_par)."""
    r, c = ev.jacobian_structure()
    J = sp.csc_matrix((ev.jacobian(x), (r, c)), shape=(ev.m, ev.n))
    if rows is not None:
        J = J[rows]
    Jd = J[:, dep]
    if Jd.shape[0] != Jd.shape[1]:
        raise ValueError(f"the constraint Jacobian with respect to the dependent variables is "
                         f"{Jd.shape[0]}×{Jd.shape[1]}, not square: cannot eliminate the states")
    return J, spla.splu(sp.csc_matrix(Jd))


def _equality_rows(ev, x, rtol=1e-6):
    """The rows of ``ev``'s constraints that are equalities at ``x``: every equality,
    and no inequality.  An inequality inactive at ``x`` (more than ``rtol`` relative
    from its bounds) does not change the local problem and is left out; one that is
    active is refused by name, since the reduced Hessian here is that of the
    equality-constrained problem (the covariance under an active constraint is
    singular along it)."""
    ineq = np.flatnonzero(ev.g_lb != ev.g_ub)
    if ineq.size == 0:
        return np.arange(ev.m)
    g = np.asarray(ev.constraints(x), dtype=float)[ineq]
    lo, hi = ev.g_lb[ineq], ev.g_ub[ineq]
    with np.errstate(invalid="ignore"):          # an infinite bound is never near
        near = ((np.isfinite(lo) & (g <= lo + rtol * np.maximum(1.0, np.abs(lo))))
                | (np.isfinite(hi) & (g >= hi - rtol * np.maximum(1.0, np.abs(hi)))))
    if near.any():
        names = [ev.constraint_rows[k].name for k in ineq[near]]
        raise ValueError(f"the inequality constraint{'s' * (len(names) > 1)} "
                         f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''} "
                         f"{'are' if len(names) > 1 else 'is'} active at the estimates: the "
                         "covariance and the profiles here are those of the problem with "
                         "equality constraints only (a Wald covariance would cross an "
                         "active constraint); deactivate it and refit to see the "
                         "uncertainty without it, or turn it into an equality (or hold a "
                         "parameter on it) if the estimates must lie on it")
    return np.setdiff1d(np.arange(ev.m), ineq[~near])


def kkt_reduced_hessian(model, block=None, evaluator=None):
    r"""Reduced Hessian of a solved simultaneous model from its KKT system.

    At the solution ``(w, u)`` of :math:`\min J(w,u)` s.t. :math:`c(w,u) = 0`
    (states and stages w, free parameters u), with
    :math:`Z = \begin{pmatrix}-c_w^{-1}c_u\\ I\end{pmatrix}` spanning the null space
    of the constraint Jacobian, the multipliers :math:`c_w^\top\lambda = -\nabla_w J`
    and :math:`W = \nabla^2 J + \sum_i\lambda_i\nabla^2 c_i`,

    .. math:: H_{\mathrm{red}} = Z^\top W Z = \nabla^2_{uu} J_k(u)

    — the Hessian of the reduced objective [GM-grad, §2.5] — from one sparse LU
    of :math:`c_w`, without simulating.

    ``evaluator``: a :class:`~pyomo_odeest.nlp.PyomoNLPEvaluator` of ``model`` as
    it is (the one that solved it; None: one is built).

    Returns
    -------
    H : (p, p) array, dwdu : dict (i, state) -> (p,) sensitivities of the grid
    states (for a block of several experiments: a list of such dicts, one per
    experiment), names : list of the free parameters, lam : multipliers (row
    order of the evaluator).
    """
    from ..nlp._evaluator import PyomoNLPEvaluator
    b = model.est if block is None else block
    P = b.problem
    names = [p for p in P.parameter_names if not b.u[p].fixed]
    ev = PyomoNLPEvaluator(model) if evaluator is None else evaluator
    x = np.array([0.0 if v.value is None else v.value for v in ev.variables], dtype=float)
    rows = _equality_rows(ev, x)
    col = {id(v): k for k, v in enumerate(ev.variables)}
    # a free parameter that enters no equation and no objective term (e.g. the initial
    # value of a species in experiments that are not part of this problem) is not a
    # column of the NLP: its rows and columns of H and its sensitivities are zero
    present = np.flatnonzero([id(b.u[p]) in col for p in names])
    par = np.array([col[id(b.u[p])] for p in names if id(b.u[p]) in col], dtype=int)
    dep = np.setdiff1d(np.arange(ev.n), par)
    Jc, lu = _factor(ev, x, dep, rows)
    D = -lu.solve(Jc[:, par].toarray())
    g = ev.gradient(x)
    lam = np.zeros(ev.m)                       # an inactive inequality's multiplier: 0
    lam[rows] = -lu.solve(g[dep], trans="T")
    hr, hc = ev.hessian_structure()
    hv = ev.hessian(x, lam, 1.0)
    off = hr != hc
    W = sp.csr_matrix((np.concatenate([hv, hv[off]]),
                       (np.concatenate([hr, hc[off]]), np.concatenate([hc, hr[off]]))),
                      shape=(ev.n, ev.n))
    Z = np.zeros((ev.n, len(names)))           # the columns of the absent parameters: zero
    Z[np.ix_(dep, present)] = D
    Z[par, present] = 1.0
    H = Z.T @ (W @ Z)

    def state_rows(sb):
        out = {}
        for (i, s) in sb.x.keys():
            k = col.get(id(sb.x[i, s]))
            out[(i, s)] = Z[k] if k is not None else np.zeros(len(names))
        return out
    blocks = getattr(b, "experiment_blocks", None)
    dwdu = [state_rows(sb) for sb in blocks] if blocks is not None else state_rows(b)
    return 0.5 * (H + H.T), dwdu, names, lam


def _shooting_hessian(nlp, x, dep, par, rel_step=1e-5):
    """Central differences of the reduced gradient Zᵀ∇L at feasible node values."""
    p = len(par)

    def feasible(upar):
        xx = x.copy()
        xx[par] = upar
        S, u_full = nlp.split(xx)
        S = S.copy()
        if nlp.init_rows:
            S[0] = nlp.l(u_full)
        for j, dm in enumerate(nlp.im.models):
            S[j + 1] = dm.simulate(np.concatenate([u_full, S[j]])).X[-1]
        xx[:nlp.ns] = S.ravel()
        return xx

    def reduced_gradient(xx):
        Jc, lu = _factor(nlp, xx, dep)
        g = nlp.gradient(xx)
        return g[par] + Jc[:, par].T @ (-lu.solve(g[dep], trans="T"))

    H = np.zeros((p, p))
    u0 = x[par]
    for a in range(p):
        h = rel_step * max(1.0, abs(u0[a]))
        e = h * np.eye(p)[a]
        H[:, a] = (reduced_gradient(feasible(u0 + e)) - reduced_gradient(feasible(u0 - e))) / (2 * h)
    return 0.5 * (H + H.T)


