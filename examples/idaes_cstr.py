r"""Kinetic parameter estimation on a dynamic IDAES flowsheet (needs ``pip install idaes-pse``).

A CSTR with IDAES's saponification example packages
(``NaOH + EthylAcetate -> SodiumAcetate + Ethanol``, rate ``k c_NaOH c_EA``,
``k = A exp(-E/(R T))``), adiabatic, ``V = 1.5 L``, feed ``1 L/s``, starts at the
steady state of a feed with 100 mol/m³ NaOH; at ``t = 0`` the feed NaOH
steps towards 150 mol/m³ (through a first-order lag, 0.5 s).  The outlet
SodiumAcetate concentration is measured every 0.5 s up to 6 s (and at
``t = 0``), with noise; the data come from the same flowsheet on a 2× finer
grid.  The pre-exponential factor ``A`` is estimated from these data.
Printed: the estimate, its error and standard error, IDAES's structural and
numerical diagnostics of the transformed model, and a last line
``idaes_cstr: k_true=... k_est=... rel_err=... status=...`` with
``k = A exp(-E/(R·303.15 K))``, the rate constant at the feed temperature.

Recipe (what differs from an IDAES ``dae.finite_difference`` workflow):

1. ``FlowsheetBlock(dynamic=True, time_set=[0, *measurement times])`` — the
   measurement times become grid points of the scheme.
2. The estimated parameter must be a ``Var``: the package's ``arrhenius`` is an
   immutable ``Param``; it is replaced by a fixed ``Var`` before the CSTR is
   built (:func:`estimable_reactions`).
3. ``m.fs.fix_initial_conditions()`` (accumulations = 0 at ``t0``: the balances
   at ``t0`` give the initial steady state); the transformation takes a fixed
   derivative as data.
4. ``TransformationFactory('odeest.adams').apply_to(m, wrt=m.fs.time,
   variant='moulton', ...)``: the implicit Adams–Moulton variant only uses
   grid-point derivatives, so it accepts the algebraic variables of the flowsheet.
5. Index reduction for the water: the package fixes ``c_H2O`` (dilute
   solution) and the volume is fixed, so the water holdup is algebraic and
   the outlet flow is an index-2 variable, determined only through
   ``d(holdup_H2O)/dt = 0``.  Adams–Moulton cannot recover a derivative from a
   state sequence stably (for ``qmax=3`` its ``σ(ζ) = (5ζ² + 8ζ - 1)/12`` has
   the root ``-1.72``), so the water accumulation is fixed to 0 at every time
   (the differentiated constraint) and its scheme equation is deactivated
   (:func:`reduce_water_index`).
6. Inputs smooth in time: the feed step passes through a first-order lag
   (a jump at a grid point would cost the multistep scheme its order for the
   next steps).
7. Initialization without the ``ipopt`` executable: Pyomo's block-triangular
   decomposition solved block by block with ``odeest_ipopt`` (a time-stepping
   simulation), or IDAES's own initializer pointed at ``odeest_ipopt``
   (:func:`initialize`); then one square solve.
8. Least-squares objective, ``A`` unfixed, ``SolverFactory('odeest_ipopt')``;
   IDAES's DiagnosticsToolbox on the square model at the estimate (its numerical
   checks need PyNumero's ASL interface: ``apt install libamplsolver-dev g++`` and
   ``python -m pyomo_odeest.nlp._pynumero_asl``; without it only the structural
   checks run).

Usage: ``python examples/idaes_cstr.py``.
"""
from __future__ import annotations

import io
import time

import numpy as np
import pyomo.environ as pyo
from pyomo.common.log import LoggingIntercept
from pyomo.environ import units

import pyomo_odeest  # noqa: F401  (registers odeest.adams and odeest_ipopt)

A_TRUE = 3.132e6                       # m³/mol/s, IDAES's saponification value
FEED = {"H2O": 55388.0, "NaOH": 100.0, "EthylAcetate": 100.0, "SodiumAcetate": 1e-8,
        "Ethanol": 1e-8}                 # IDAES's CSTR test feed (products: 1e-8, not 0)
NAOH_STEP = 150.0                      # feed NaOH after the step, mol/m³
FEED_LAG = 0.5                         # s, time constant of the feed change
MEASURED = "SodiumAcetate"
TIMES = [0.5 * i for i in range(13)]   # 0, 0.5, ..., 6 s
SQUARE_OPTIONS = {"mumps_permuting_scaling": 0, "mumps_scaling": 0,
                  "fixed_variable_treatment": "relax_bounds"}


def feed_naoh(t):
    """Feed NaOH [mol/m³]: a step from 100 to 150 at t = 0 through a first-order lag."""
    return FEED["NaOH"] + (NAOH_STEP - FEED["NaOH"]) * (1.0 - np.exp(-float(t) / FEED_LAG))


def estimable_reactions(params):
    """Replace the immutable ``arrhenius`` Param of the reaction package by a fixed Var."""
    value = pyo.value(params.arrhenius)
    u = units.get_units(params.arrhenius)
    params.del_component(params.arrhenius)
    params.arrhenius = pyo.Var(initialize=value, units=u, bounds=(1e3, 1e9),
                               doc="Arrhenius pre-exponential factor (estimated)")
    params.arrhenius.fix()
    return params.arrhenius


def reduce_water_index(cv):
    """Water holdup is algebraic (fixed c_H2O and volume): use its differentiated form."""
    for t in cv.flowsheet().time:
        cv.material_accumulation[t, "Liq", "H2O"].fix(0.0)
    cv.material_accumulation_odeest_eq_x[:, "Liq", "H2O"].deactivate()


def build_model(times=TIMES, steps_per_interval=4, qmax=3, arrhenius=A_TRUE):
    """The transformed flowsheet with all inputs fixed (0 degrees of freedom)."""
    from idaes.core import FlowsheetBlock
    from idaes.models.properties.examples.saponification_reactions import (
        SaponificationReactionParameterBlock)
    from idaes.models.properties.examples.saponification_thermo import SaponificationParameterBlock
    from idaes.models.unit_models import CSTR

    m = pyo.ConcreteModel()
    m.fs = FlowsheetBlock(dynamic=True, time_set=sorted(set([0.0] + list(times))),
                          time_units=units.s)
    m.fs.properties = SaponificationParameterBlock()
    m.fs.reactions = SaponificationReactionParameterBlock(property_package=m.fs.properties)
    estimable_reactions(m.fs.reactions).set_value(arrhenius)
    m.fs.unit = CSTR(property_package=m.fs.properties, reaction_package=m.fs.reactions,
                     has_equilibrium_reactions=False, has_heat_transfer=True,
                     has_heat_of_reaction=True, has_pressure_change=True)
    m.fs.fix_initial_conditions()                         # steady state at t0
    pyo.TransformationFactory("odeest.adams").apply_to(
        m, wrt=m.fs.time, variant="moulton", qmax=qmax, steps_per_interval=steps_per_interval)
    u = m.fs.unit
    reduce_water_index(u.control_volume)
    for t in m.fs.time:
        u.inlet.flow_vol[t].fix(1.0e-3)
        for j, c in FEED.items():
            u.inlet.conc_mol_comp[t, j].fix(feed_naoh(t) if j == "NaOH" else c)
        u.inlet.temperature[t].fix(303.15)
        u.inlet.pressure[t].fix(101325.0)
        u.volume[t].fix(1.5e-3)
        u.heat_duty[t].fix(0.0)
        u.deltaP[t].fix(0.0)
    m.measurement_times = [float(t) for t in times]
    return m


def outlet(m, j=MEASURED):
    """Outlet concentration of ``j`` at the measurement times."""
    po = m.fs.unit.control_volume.properties_out
    return np.array([pyo.value(po[t].conc_mol_comp[j]) for t in m.measurement_times])


def solve_square(m):
    """Simulation at the current (fixed) ``A``: one square solve; returns Ipopt iterations."""
    s = pyo.SolverFactory("odeest_ipopt")
    r = s.solve(m, options=dict(SQUARE_OPTIONS, tol=1e-10))
    pyo.assert_optimal_termination(r)
    return s.last_info["iterations"]


def initialize(m, method="scc"):
    """Simulate at the current (fixed) ``A`` from scratch; returns the final Ipopt iterations.

    ``method="scc"`` (default): Pyomo's block-triangular decomposition of the
    square model (``solve_strongly_connected_components``): the scheme makes it
    a sequence of small systems in time order — the initial steady state, then
    step after step — each solved by ``odeest_ipopt`` (or explicitly when 1×1).
    ``method="idaes"``: IDAES's own initializer pointed at ``odeest_ipopt``;
    faster, but it solves the whole control volume at once from IDAES's start
    point, which fails on some grids of this model.  Either way a square solve
    of the whole model follows.
    """
    if method == "idaes":
        u = m.fs.unit
        u.default_initializer(solver="odeest_ipopt",
                              solver_options=dict(SQUARE_OPTIONS)).initialize(u)
    elif method == "scc":
        from pyomo.contrib.incidence_analysis import solve_strongly_connected_components
        solve_strongly_connected_components(
            m, solver=pyo.SolverFactory("odeest_ipopt"),
            solve_kwds={"options": dict(SQUARE_OPTIONS, tol=1e-10)})
    else:
        raise ValueError(f"unknown initialization method {method!r}")
    return solve_square(m)


def add_least_squares(m, data):
    """Sum of squared outlet-concentration residuals at the measurement times."""
    po = m.fs.unit.control_volume.properties_out
    cu = units.mol / units.m**3
    if m.component("sse") is not None:
        m.del_component(m.sse)
    m.sse = pyo.Objective(expr=sum((po[t].conc_mol_comp[MEASURED] - float(y) * cu) ** 2
                                   for t, y in zip(m.measurement_times, data)))


def estimate(m, data, a0, options=None, init="scc"):
    """Initialize at ``A = a0`` (:func:`initialize`), then fit ``A``.

    Returns ``(A_est, Ipopt status, iterations, seconds)``; the model is left
    square (``A`` fixed at the estimate, objective deactivated).
    """
    A = m.fs.reactions.arrhenius
    A.fix(a0)
    initialize(m, init)
    add_least_squares(m, data)
    A.unfix()
    s = pyo.SolverFactory("odeest_ipopt")
    t0 = time.perf_counter()
    s.solve(m, options=dict({"tol": 1e-10}, **(options or {})))
    seconds = time.perf_counter() - t0
    A.fix()
    m.sse.deactivate()
    return pyo.value(A), s.last_info["status"], s.last_info["iterations"], seconds


def standard_error(m, sigma, rel_step=1e-4):
    """Gauss–Newton standard error of ``A``: ``sigma / ||dy/dA||`` (central differences)."""
    A = m.fs.reactions.arrhenius
    a = pyo.value(A)
    ys = []
    for f in (1 + rel_step, 1 - rel_step):
        A.fix(a * f)
        solve_square(m)
        ys.append(outlet(m))
    A.fix(a)
    solve_square(m)
    return sigma / np.linalg.norm((ys[0] - ys[1]) / (2 * rel_step * a))


def apply_idaes_scaling(m):
    """IDAES's CSTR scaler, with the user factors it asks for (as in IDAES's CSTR test).

    Applied after the estimation here, for the diagnostics (Jacobian norms and
    condition number). A later ``odeest_ipopt`` solve of the model would use
    the same ``scaling_factor`` Suffixes as Ipopt user scaling.
    """
    from idaes.core.scaling import set_scaling_factor
    from idaes.models.unit_models.cstr import CSTRScaler
    cv = m.fs.unit.control_volume
    for t in m.fs.time:
        set_scaling_factor(cv.properties_in[t].flow_vol, 1e3)
        set_scaling_factor(cv.volume[t], 1e3)
        for v in cv.reactions[t].reaction_rate.values():
            set_scaling_factor(v, 1e-3)
    with LoggingIntercept(io.StringIO(), "pyomo"):       # a deprecation notice inside IDAES
        CSTRScaler().scale_model(m.fs.unit)


def odeest_jacobian(m, include_scaling_factors=True):
    """The Jacobian IDAES's numerical checks use (active constraints × free variables,
    IDAES scaling factors applied), from odeest's own evaluator: ``(jac, constraints,
    variables)``.  A cross-check of ``idaes.core.scaling.util.get_jacobian``, which
    obtains it through PyNumero's ASL interface.
    """
    from idaes.core.scaling import get_scaling_factor
    from scipy.sparse import coo_matrix, diags

    from pyomo_odeest.nlp._evaluator import PyomoNLPEvaluator
    ev = PyomoNLPEvaluator(m)
    x = np.array([0.0 if v.value is None else v.value for v in ev.variables])
    rows, cols = ev.jacobian_structure()
    jac = coo_matrix((ev.jacobian(x), (rows, cols)), shape=(ev.m, ev.n)).tocsr()
    if include_scaling_factors:
        sv = np.array([get_scaling_factor(v, default=1, warning=False) for v in ev.variables],
                      dtype=float)
        sc = np.array([get_scaling_factor(c, default=1, warning=False)
                       for c in ev.constraint_rows], dtype=float)
        jac = (diags(sc) @ (jac @ diags(1.0 / sv))).tocsr()
    return jac, list(ev.constraint_rows), list(ev.variables)


def diagnostics(m, numerical=True):
    """IDAES's DiagnosticsToolbox reports (text), unpatched: structural, then numerical.

    IDAES's numerical checks read the Jacobian through PyNumero's ASL
    interface; where it is missing, the report says how to build it
    (``python -m pyomo_odeest.nlp._pynumero_asl``, with Debian's
    ``libamplsolver-dev``) and only the structural checks run.
    """
    from idaes.core.util.diagnostics_tools import DiagnosticsToolbox

    from pyomo_odeest.nlp._pynumero_asl import pynumero_asl_available
    dt = DiagnosticsToolbox(m)
    out = io.StringIO()
    dt.report_structural_issues(stream=out)
    if numerical:
        if pynumero_asl_available():
            dt.report_numerical_issues(stream=out)
        else:
            out.write("IDAES's numerical checks skipped: they need PyNumero's ASL interface; "
                      "build it with `apt install libamplsolver-dev g++` and "
                      "`python -m pyomo_odeest.nlp._pynumero_asl`\n")
    return out.getvalue(), dt


def main(seed=0, sigma=0.2, a0=0.5 * A_TRUE, steps_per_interval=4, ref_steps=8):
    from idaes.core.util.model_statistics import degrees_of_freedom

    t_start = time.perf_counter()
    # "plant": the same flowsheet on a 2x finer grid, at A_TRUE
    ref = build_model(steps_per_interval=ref_steps)
    initialize(ref)
    truth = outlet(ref)
    data = truth + sigma * np.random.default_rng(seed).standard_normal(truth.size)
    print(f"data: {MEASURED} out [mol/m3] at t = {TIMES[0]}..{TIMES[-1]} s from a "
          f"{len(ref.fs.time)}-point simulation at A_true, noise sigma {sigma}:\n  "
          + ", ".join(f"{v:.2f}" for v in truth))

    m = build_model(steps_per_interval=steps_per_interval)
    print(f"estimation model: {len(m.fs.time)} grid points, qmax 3, "
          f"degrees of freedom at fixed A: {degrees_of_freedom(m)}")
    initialize(m)
    print(f"  max |outlet - reference| at A_true (discretization error): "
          f"{np.max(np.abs(outlet(m) - truth)):.2e} mol/m3")

    a_bias, *_ = estimate(m, truth, a0)                   # noise-free: discretization bias only
    a_est, status, iters, secs = estimate(m, data, a0)
    rel = abs(a_est - A_TRUE) / A_TRUE
    rms = float(np.sqrt(np.mean((outlet(m) - data) ** 2)))
    se = standard_error(m, sigma)
    print(f"A [m3/mol/s]: start {a0:.6g}, estimate {a_est:.6g}, truth {A_TRUE:.6g}\n"
          f"  rel. error {rel:.2e}; standard error {se / A_TRUE:.2e} (relative); "
          f"from noise-free data {abs(a_bias - A_TRUE) / A_TRUE:.1e}\n"
          f"  {iters} Ipopt iterations, {secs:.1f} s; fit rms {rms:.3f}")

    apply_idaes_scaling(m)
    text, _ = diagnostics(m)
    print(text)
    # k = A exp(-E/(R T)) at the feed temperature (the estimate only changes A)
    arr = pyo.value(pyo.exp(-m.fs.reactions.energy_activation / (8.314462618 * 303.15)))
    print(f"total {time.perf_counter() - t_start:.1f} s")
    print(f"idaes_cstr: k_true={A_TRUE * arr:.6g} k_est={a_est * arr:.6g} rel_err={rel:.3e} "
          f"status={status}")


if __name__ == "__main__":
    main()
