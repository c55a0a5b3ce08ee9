"""The ``odeest_ipopt`` Pyomo solver: Ipopt through cyipopt, no ASL needed.

Registered with Pyomo's ``SolverFactory`` when :mod:`pyomo_odeest` is
imported::

    import pyomo.environ as pyo
    import pyomo_odeest                      # registers 'odeest_ipopt'
    res = pyo.SolverFactory('odeest_ipopt').solve(model, tee=True,
                                                  options={'tol': 1e-10})

Derivatives are exact (symbolic, see :mod:`pyomo_odeest.nlp`).  After the
solve the primal values are loaded into the model and, when the model declares
IMPORT Suffixes, the multipliers ``dual`` (Ipopt's λ of the minimization form,
the convention of ``SolverFactory('cyipopt')``), ``ipopt_zL_out`` (z_L) and
``ipopt_zU_out`` (-z_U): see docs/solver.md, section "Multiplier sign convention".
"""
from __future__ import annotations

import logging
import time

import numpy as np
from pyomo.common.config import ConfigBlock, ConfigValue
from pyomo.core.base.block import BlockData
from pyomo.core.base.suffix import Suffix, SuffixFinder, active_import_suffix_generator
from pyomo.core.base.symbol_map import SymbolMap
from pyomo.core.staleflag import StaleFlagManager
from pyomo.opt import SolutionStatus, SolverFactory, SolverResults, TerminationCondition

from ._cyipopt_adapter import (_takes, adjoint_multipliers, ipopt_version, solve_with_ipopt,
                               start_value_scaling)
from ._evaluator import PyomoNLPEvaluator

__all__ = ["OdeestIpoptSolver", "SOLVER_NAME", "use_as_ipopt"]

logger = logging.getLogger(__name__)

SOLVER_NAME = "odeest_ipopt"

_TERMINATION = {
    "Solve_Succeeded": TerminationCondition.optimal,
    "Solved_To_Acceptable_Level": TerminationCondition.locallyOptimal,
    "Infeasible_Problem_Detected": TerminationCondition.infeasible,
    "Search_Direction_Becomes_Too_Small": TerminationCondition.minStepLength,
    "Diverging_Iterates": TerminationCondition.unbounded,
    "User_Requested_Stop": TerminationCondition.userInterrupt,
    "Feasible_Point_Found": TerminationCondition.feasible,
    "Maximum_Iterations_Exceeded": TerminationCondition.maxIterations,
    "Restoration_Failed": TerminationCondition.noSolution,
    "Error_In_Step_Computation": TerminationCondition.solverFailure,
    "Maximum_CpuTime_Exceeded": TerminationCondition.maxTimeLimit,
    "Maximum_WallTime_Exceeded": TerminationCondition.maxTimeLimit,
    "Not_Enough_Degrees_Of_Freedom": TerminationCondition.invalidProblem,
    "Invalid_Problem_Definition": TerminationCondition.invalidProblem,
    "Invalid_Option": TerminationCondition.error,
    "Invalid_Number_Detected": TerminationCondition.internalSolverError,
    "Unrecoverable_Exception": TerminationCondition.internalSolverError,
    "NonIpopt_Exception_Thrown": TerminationCondition.error,
    "Insufficient_Memory": TerminationCondition.resourceInterrupt,
    "Internal_Error": TerminationCondition.internalSolverError,
}


def add_scaling_factors(model, variables):
    """Put ``1/|v|`` (1 where v = 0 or has no value) on ``model.scaling_factor`` for every
    unfixed variable of ``variables`` that has no factor there yet (the Suffix is
    created if needed); the scaling of parameters by their start values that
    :func:`~pyomo_odeest.nlp._cyipopt_adapter.start_value_scaling` defines."""
    sf = getattr(model, "scaling_factor", None)
    if sf is None:
        model.scaling_factor = sf = Suffix(direction=Suffix.EXPORT)
    elif not isinstance(sf, Suffix):
        raise ValueError("model.scaling_factor exists and is not a Suffix")
    for v in variables:
        if not v.fixed and v not in sf:
            sf[v] = float(start_value_scaling([0.0 if v.value is None else v.value])[0])
    return sf


#: the attribute of a block that holds its factors by index (:func:`add_index_scaling`)
INDEX_SCALING = "_odeest_index_scaling"


def add_index_scaling(block, component, factors, position=-1):
    """Scale the variables of the indexed ``component`` by one factor per value of their
    index at ``position`` (``factors``: that value -> factor; values not in it keep 1):
    one entry per state for the block's states at every grid point and stage, where a
    ``scaling_factor`` Suffix would hold one entry per variable (about 170 bytes each).
    A Suffix's factor, looked up first, overrides it (the user's own factors are kept),
    as do the factors ``component`` already has here (kept on ``block``, which a
    clone copies)."""
    rules = block.__dict__.setdefault(INDEX_SCALING, [])
    for comp, pos, old in rules:
        if comp is component and pos == position:
            for k, v in factors.items():
                old.setdefault(k, float(v))
            return
    rules.append((component, position, {k: float(v) for k, v in factors.items()}))


def scaling_lookup(model):
    """``find(component) -> factor or None``: the scaling factor of a variable,
    constraint or objective of ``model``, looked up in its ``scaling_factor`` Suffixes
    as :class:`~pyomo.core.base.suffix.SuffixFinder` does, then in the factors by index
    of :func:`add_index_scaling`; None where the model declares neither."""
    suffixes = [sfx for sfx in model.component_data_objects(Suffix, descend_into=True)
                if sfx.local_name == "scaling_factor"]
    rules = {}
    for blk in model.block_data_objects(descend_into=True):
        rules.update((id(r[0]), r) for r in blk.__dict__.get(INDEX_SCALING, ()))
    if not suffixes and not rules:
        return None
    if not suffixes:
        def by_suffix(c):
            return None
    elif len(suffixes) == 1 and suffixes[0].parent_block() is model:
        # one Suffix, on the model itself: SuffixFinder's three passes reduce to three
        # dictionary lookups (component, container, None): 0.06 s instead of 0.16 s for
        # 80 000 components
        sfx = suffixes[0]
        default = sfx.get(None)

        def by_suffix(c):
            v = sfx.get(c)
            if v is None:
                v = sfx.get(c.parent_component(), default)
            return v
    else:
        by_suffix = SuffixFinder("scaling_factor", default=None, context=model).find
    if not rules:
        return by_suffix

    def find(c):
        v = by_suffix(c)
        if v is None:
            rule = rules.get(id(c.parent_component()))
            if rule is not None:
                index = c.index()
                v = rule[2].get(index[rule[1]] if isinstance(index, tuple) else index)
        return v
    return find


def user_scaling(model, ev):
    """Scaling factors from ``scaling_factor`` Suffixes and the factors by index of
    :func:`add_index_scaling`, as keyword arguments of
    :func:`~pyomo_odeest.nlp._cyipopt_adapter.solve_with_ipopt` (empty if the
    model declares none).

    Pyomo's convention (the one of the Ipopt AMPL interface and of IDAES),
    looked up as :class:`~pyomo.core.base.suffix.SuffixFinder` does: see
    docs/solver.md, section "User scaling".  Variables without a factor get 1,
    constraints and the objective NaN (Ipopt's gradient-based factor).
    """
    find = scaling_lookup(model)
    if find is None:
        return {}

    def factors(components, what, missing=1.0):
        out = np.full(len(components), missing)
        for k, c in enumerate(components):
            v = find(c)
            if v is None:
                continue
            v = float(v)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"scaling_factor of {what} '{c.name}' is {v}: "
                                 "scaling factors must be positive and finite")
            out[k] = v
        return out

    obj = ev.objective_component
    return dict(x_scaling=factors(ev.variables, "variable"),
                g_scaling=factors(ev.constraint_rows, "constraint", np.nan),
                obj_scaling=factors([obj], "objective", np.nan)[0] if obj is not None else np.nan)


_SOLUTION_STATUS = {
    TerminationCondition.optimal: SolutionStatus.optimal,
    TerminationCondition.locallyOptimal: SolutionStatus.locallyOptimal,
    TerminationCondition.feasible: SolutionStatus.feasible,
    TerminationCondition.infeasible: SolutionStatus.infeasible,
    TerminationCondition.unbounded: SolutionStatus.unbounded,
    TerminationCondition.maxIterations: SolutionStatus.stoppedByLimit,
    TerminationCondition.maxTimeLimit: SolutionStatus.stoppedByLimit,
    TerminationCondition.minStepLength: SolutionStatus.stoppedByLimit,
    TerminationCondition.userInterrupt: SolutionStatus.stoppedByLimit,
}

# keywords of Pyomo's ``OptSolver.solve`` that concern files and labels of
# solvers driven through files; this solver writes no files
_NO_FILES = ("symbolic_solver_labels", "keepfiles", "warmstart")
_REFUSED = {
    "solnfile": "odeest_ipopt reads no solution file (the solution comes back in memory)",
    "executable": "odeest_ipopt runs Ipopt in-process through cyipopt; there is no executable",
    "io_options": "odeest_ipopt writes no problem file",
    "solver_io": "odeest_ipopt writes no problem file",
}
_IMPORT_SUFFIXES = ("dual", "ipopt_zL_out", "ipopt_zU_out")
# options of the AMPL interface of the ipopt executable (no meaning in-process)
_AMPL_ONLY_OPTIONS = ("halt_on_ampl_error", "wantsol")


def _in_process_options(options):
    """Options that tools written for the ipopt executable pass (pyomo.contrib.doe
    asks for ``linear_solver=ma57`` and ``halt_on_ampl_error``), made safe here.

    The wheel's Ipopt has MUMPS only, and a failed HSL solve can leave the
    process unable to create the next problem: another linear solver is
    replaced by MUMPS with a warning (it changes speed, not the solution).
    AMPL-interface options are dropped with a warning.
    """
    out = dict(options)
    ls = out.get("linear_solver")
    if ls is not None and str(ls).lower() != "mumps":
        logger.warning("odeest_ipopt: linear_solver=%r is not available in-process "
                       "(Ipopt from cyipopt-wheels has MUMPS only); using mumps", ls)
        out["linear_solver"] = "mumps"
    for k in _AMPL_ONLY_OPTIONS:
        if k in out:
            logger.warning("odeest_ipopt: option %r belongs to the AMPL interface of the "
                           "ipopt executable; ignored", k)
            del out[k]
    return out


def _parse_options_string(text):
    """``'max_iter=50 tol=1e-8 mu_strategy=adaptive'`` as a dict of typed values."""
    out = {}
    for item in (text or "").split():
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"options_string: '{item}' is not key=value")
        for conv in (int, float):
            try:
                out[key] = conv(val)
                break
            except ValueError:
                continue
        else:
            out[key] = val
    return out


@SolverFactory.register(SOLVER_NAME, doc="Ipopt through cyipopt with exact vectorised "
                        "derivatives from Pyomo expressions (no ASL, no executable)")
class OdeestIpoptSolver:
    """Pyomo solver plugin: ``SolverFactory('odeest_ipopt')``.

    Keyword arguments of :meth:`solve` (also accepted by the constructor):

    tee : bool
        Show Ipopt's iteration log.
    options : dict
        Ipopt options (``tol``, ``max_iter``, ``hessian_approximation``,
        ``mumps_permuting_scaling``, ...); ints are accepted where Ipopt takes
        a real number.  The solver's ``options`` attribute (a dict, as for
        Pyomo's solvers) is used too; ``solve(options=...)`` wins.
    options_string : str
        More options as ``'key=value key=value'``.
    load_solutions : bool
        Load primal values (and suffixes) into the model (default True).
        With False the model is left unchanged and ``results.solution`` holds
        the solution, for ``model.solutions.load_from(results)``.
    suffixes : list of str
        Suffixes to return besides the model's active IMPORT suffixes:
        ``'dual'``, ``'ipopt_zL_out'``, ``'ipopt_zU_out'``.
    timelimit : float
        Wall-clock limit in seconds (Ipopt's ``max_wall_time``).
    progress : bool or None
        One line per block of iterations on standard error
        (:func:`~pyomo_odeest.nlp.solve_with_ipopt`); None (default): when
        standard error is a terminal and ``tee`` is off.
    logfile : str
        Write Ipopt's log to this file (Ipopt's ``output_file``).
    report_timing : bool
        Print set-up and solve times.
    templatize : bool
        Group rows of the same shape and evaluate stored templates
        vectorised (default True); False walks every row on its own.
    adjoint_start : iterable of Vars, optional
        The decisions of the model (e.g. its parameters) when its equality
        constraints determine every other variable: Ipopt starts from the
        multipliers that make the Lagrangian stationary in those other variables
        (:func:`~pyomo_odeest.nlp._cyipopt_adapter.adjoint_multipliers`: the discrete
        adjoint at a simulated start) instead of its own estimate; ignored where
        they cannot be computed.
    intermediate_callback : callable
        Called each iteration with keywords ``iter_count, obj_value, inf_pr,
        inf_du, mu``; returning ``False`` stops Ipopt.  A callback that names the
        parameter ``iterate`` also gets a function that loads Ipopt's current
        point into the model's variables (and returns it as a vector).  A
        callback with ``forkable = True`` may run in the isolated process of a
        solve with a time limit; its ``state`` attribute is sent back.
    symbolic_solver_labels, keepfiles, warmstart
        Accepted for compatibility; no files are written and Ipopt always
        starts from the current values of the variables (a warm start of the
        primal values).  With ``symbolic_solver_labels`` the solution in
        ``results`` is labelled with component names.

    An exception raised while Ipopt runs (in the evaluator, in the
    intermediate callback, or Ctrl-C) stops the solve and is re-raised;
    nothing is loaded into the model then.

    After a solve, :attr:`last_info` holds timings (``setup_s``, ``eval_s``,
    ``ipopt_s``), ``iterations``, callback counts and the raw
    :class:`~pyomo_odeest.nlp._cyipopt_adapter.IpoptResult`.
    """

    CONFIG = ConfigBlock("odeest_ipopt")
    CONFIG.declare("tee", ConfigValue(default=False, domain=bool))
    CONFIG.declare("load_solutions", ConfigValue(default=True, domain=bool))
    CONFIG.declare("templatize", ConfigValue(default=True, domain=bool))
    CONFIG.declare("options", ConfigValue(default=None, domain=dict))
    CONFIG.declare("options_string", ConfigValue(default=None, domain=str))
    CONFIG.declare("intermediate_callback", ConfigValue(default=None))
    CONFIG.declare("suffixes", ConfigValue(default=(), domain=list))
    CONFIG.declare("timelimit", ConfigValue(default=None, domain=float))
    CONFIG.declare("logfile", ConfigValue(default=None, domain=str))
    CONFIG.declare("report_timing", ConfigValue(default=False, domain=bool))
    CONFIG.declare("select", ConfigValue(default=0))
    CONFIG.declare("progress", ConfigValue(default=None))
    CONFIG.declare("adjoint_start", ConfigValue(default=None))
    for _k in _NO_FILES:
        CONFIG.declare(_k, ConfigValue(default=None, domain=bool))

    def __init__(self, **kwds):
        self.options = dict(kwds.pop("options", None) or {})
        self._check_keywords(kwds)
        self.config = self.CONFIG(kwds)
        self.last_info = {}

    @classmethod
    def _check_keywords(cls, kwds):
        for k in kwds:
            if k in _REFUSED:
                raise ValueError(f"odeest_ipopt: keyword '{k}' is not supported: {_REFUSED[k]}")
            if k not in cls.CONFIG:
                raise ValueError(
                    f"odeest_ipopt: unknown keyword '{k}'; accepted: "
                    + ", ".join(sorted(cls.CONFIG.keys())))

    # Pyomo solver API ------------------------------------------------------
    def available(self, exception_flag=False):
        try:
            import cyipopt  # noqa: F401
        except ImportError:
            if exception_flag:
                from ._cyipopt_adapter import CYIPOPT_MISSING
                raise RuntimeError(CYIPOPT_MISSING) from None
            return False
        return True

    def license_is_valid(self):
        return True

    def version(self):
        """Ipopt's version, e.g. ``(3, 14, 11)`` (None without cyipopt)."""
        return ipopt_version()

    def warm_start_capable(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, t, v, traceback):
        pass

    def solve(self, model, **kwds):
        """Solve ``model``; return a Pyomo ``SolverResults``."""
        options = dict(self.options)
        options.update(kwds.pop("options", None) or {})
        self._check_keywords(kwds)
        config = self.config(kwds)
        options.update(_parse_options_string(config.options_string))
        options = _in_process_options(options)
        if config.timelimit is not None:
            options.setdefault("max_wall_time", float(config.timelimit))
        if config.logfile is not None:
            options.setdefault("output_file", config.logfile)
            options.setdefault("file_print_level", 5)
        if config.select not in (0, None):
            raise ValueError("odeest_ipopt returns one solution: select must be 0")
        bad = [s for s in config.suffixes if s not in _IMPORT_SUFFIXES]
        if bad:
            raise ValueError(f"odeest_ipopt: suffix '{bad[0]}' is not available; "
                             f"available: {', '.join(_IMPORT_SUFFIXES)}")
        if not isinstance(model, BlockData):
            raise ValueError("odeest_ipopt.solve(model): model must be a Pyomo Block or model")

        t0 = time.perf_counter()
        ev = PyomoNLPEvaluator(model, templatize=config.templatize)
        if ev.n == 0:
            raise ValueError(f"model '{model.name}' has no free variables in its "
                             "active constraints and objective")
        nan_start = [v for v in ev.variables if v.value is not None and not np.isfinite(v.value)]
        if nan_start:
            v = nan_start[0]
            raise ValueError(f"variable '{v.name}' has the start value {v.value}"
                             f"{f' (and {len(nan_start) - 1} more)' if len(nan_start) > 1 else ''}: "
                             "give it a finite value (or None to start at 0, moved into its bounds)")
        scaling = user_scaling(model, ev)
        y0 = None
        if config.adjoint_start is not None:
            chosen = {id(v) for v in config.adjoint_start}
            y0 = adjoint_multipliers(ev, ev.x0, [id(v) in chosen for v in ev.variables])
        setup_s = time.perf_counter() - t0
        # raises (and loads nothing) if a callback raised or Ctrl-C was pressed
        cb = config.intermediate_callback
        if cb is not None and _takes(cb, "iterate"):
            cb = _LoadingCallback(cb, ev)
        r = solve_with_ipopt(ev, options=options, tee=config.tee, intermediate=cb,
                             progress=config.progress, multipliers=y0, **scaling)

        results = SolverResults()
        results.problem.name = model.name
        results.problem.number_of_constraints = ev.m
        results.problem.number_of_variables = ev.n
        results.problem.number_of_continuous_variables = ev.n
        results.problem.number_of_binary_variables = 0
        results.problem.number_of_integer_variables = 0
        results.problem.number_of_objectives = 1 if ev.objective_component is not None else 0
        obj_value = ev.sense * r.obj
        if ev.objective_component is not None:
            results.problem.sense = ev.objective_component.sense
            if ev.sense > 0:
                results.problem.upper_bound = obj_value
            else:
                results.problem.lower_bound = obj_value
        tc = _TERMINATION.get(r.status_name, TerminationCondition.unknown)
        results.solver.name = SOLVER_NAME
        results.solver.return_code = r.status
        results.solver.message = results.solver.termination_message = r.message
        results.solver.termination_condition = tc
        results.solver.status = TerminationCondition.to_solver_status(tc)
        results.solver.wallclock_time = results.solver.time = setup_s + r.ipopt_s
        results.solver.iterations = r.iterations
        results.solver.ipopt_status = r.status_name

        wanted = set(config.suffixes) | {
            name for name, _ in active_import_suffix_generator(model)
            if name in _IMPORT_SUFFIXES}
        values = {"dual": (ev.constraint_rows, r.mult_g),
                  "ipopt_zL_out": (ev.variables, r.mult_x_L),
                  "ipopt_zU_out": (ev.variables, -r.mult_x_U)}
        if config.load_solutions:
            ev.load_x(r.x)
            suffixes = dict(active_import_suffix_generator(model))
            for name in wanted & set(suffixes):
                comps, vals = values[name]
                s = suffixes[name]
                s.clear()
                s.update(zip(comps, vals.tolist()))
            StaleFlagManager.mark_all_as_stale(delayed=True)
        else:
            _store_solution(results, ev, r, obj_value, tc, wanted, values,
                            bool(config.symbolic_solver_labels))

        self.last_info = dict(setup_s=setup_s, eval_s=r.eval_s, ipopt_s=r.ipopt_s,
                              iterations=r.iterations, status=r.status_name,
                              objective=obj_value, counts=r.counts, raw=r,
                              evaluator_stats=ev.stats, adjoint_start=y0 is not None)
        if config.report_timing:
            print(f"odeest_ipopt: set-up {setup_s:.3f} s, Ipopt {r.ipopt_s:.3f} s "
                  f"({r.iterations} iterations, callbacks {r.eval_s:.3f} s)")
        self.evaluator = ev
        return results


class _LoadingCallback:
    """An intermediate callback that names ``iterate``: its ``iterate()`` loads Ipopt's
    current point into the model's variables first (``forkable`` and ``state`` are the
    callback's)."""

    def __init__(self, cb, ev):
        self.cb, self.ev = cb, ev

    @property
    def forkable(self):
        return bool(getattr(self.cb, "forkable", False))

    @property
    def state(self):
        return getattr(self.cb, "state", None)

    @state.setter
    def state(self, value):
        self.cb.state = value

    def __call__(self, iter_count, obj_value, inf_pr, inf_du, mu, iterate):
        def load():
            x = iterate()
            self.ev.load_x(x)
            return x
        return self.cb(iter_count=iter_count, obj_value=obj_value, inf_pr=inf_pr,
                       inf_du=inf_du, mu=mu, iterate=load)


def _store_solution(results, ev, r, obj_value, tc, wanted, values, symbolic):
    """Fill ``results.solution`` (with a symbol map) for ``model.solutions.load_from``."""
    smap = SymbolMap()

    def add(table, comp, k, prefix, entry):
        sym = comp.getname(fully_qualified=True) if symbolic else f"{prefix}{k}"
        smap.addSymbol(comp, sym)
        table[sym] = entry

    soln = results.solution.add()
    soln.status = _SOLUTION_STATUS.get(tc, SolutionStatus.other)
    soln.message = r.message
    var_entries = [{"Value": v} for v in r.x.tolist()]
    for name in ("ipopt_zL_out", "ipopt_zU_out"):
        if name in wanted:
            for e, v in zip(var_entries, values[name][1].tolist()):
                e[name] = v
    for k, (v, e) in enumerate(zip(ev.variables, var_entries)):
        add(soln.variable, v, k, "x", e)
    if "dual" in wanted:
        for k, (c, d) in enumerate(zip(ev.constraint_rows, r.mult_g.tolist())):
            add(soln.constraint, c, k, "c", {"Dual": d})
    if ev.objective_component is not None:
        add(soln.objective, ev.objective_component, 0, "o", {"Value": obj_value})
    results._smap = smap


class use_as_ipopt:
    """Make ``SolverFactory('ipopt')`` return the ``odeest_ipopt`` solver.

    Tools that name the solver ``'ipopt'`` in their code (parmest's
    ``Estimator.theta_est``, its bootstrap and likelihood-ratio functions, the
    default solver of ``pyomo.contrib.doe``) then run on a machine without an
    ipopt executable::

        import pyomo_odeest
        pyomo_odeest.use_as_ipopt()            # from now on, in this process
        with pyomo_odeest.use_as_ipopt():      # or only inside the block
            ...

    This is an explicit opt-in, not automatic: importing the package changes
    nothing in Pyomo, an ipopt executable that the user installs keeps its
    name, and code that asks for ``'ipopt'`` gets what it asked for unless the
    user said otherwise.  :meth:`restore` (or leaving the ``with`` block)
    puts back what ``'ipopt'`` meant before.
    """

    def __init__(self):
        self._saved = (SolverFactory._cls.get("ipopt"), SolverFactory._doc.get("ipopt"))
        SolverFactory.register("ipopt", doc="odeest_ipopt (Ipopt through cyipopt), "
                               "registered by pyomo_odeest.use_as_ipopt()")(OdeestIpoptSolver)

    def restore(self):
        cls, doc = self._saved
        if cls is None:
            SolverFactory._cls.pop("ipopt", None)
            SolverFactory._doc.pop("ipopt", None)
        else:
            SolverFactory.register("ipopt", doc=doc)(cls)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore()
