"""Bad and edge inputs, as a new user would try them: one parametrized catalogue.

Each case either raises an exception whose type and message name the culprit
and what would be valid, or runs and reports a warning / an unsuccessful
status.  No case may end in a wrong answer reported as success or a raw
traceback from pandas, numpy or cyipopt.
"""
import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest
from helpers import benchmark_module

import pyomo_odeest as po
from pyomo_odeest import diagnose
from pyomo_odeest.analysis import amplification
from pyomo_odeest.discretization.schemes import AdamsMoulton, AdamsPC, Enright, SemiImplicitEnright
from pyomo_odeest import estimate_size, ProblemTooLargeError

T6 = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])


def decay_data(k=1.0, noise=0.0, seed=0):
    x = 2.0 * np.exp(-k * T6)
    x = x + noise * np.random.default_rng(seed).normal(size=x.size)
    return pd.DataFrame({"x": x}, index=T6)


def decay(data=None, name="k", start=0.7, lb=None, ub=None, **kw):
    """x' = -k x, x(0) = 2: the smallest estimation problem."""
    return po.EstimationProblem(
        states=["x"], parameters=[po.Parameter(name, start, lb=lb, ub=ub)],
        rhs=lambda x, u, t: [-u[name] * x.x], initial={"x": 2.0},
        data=decay_data() if data is None else data, **kw)


def two_state(data=None, **kw):
    t = np.array([1.0, 2.0, 3.0])
    if data is None:
        data = pd.DataFrame({"a": np.exp(-t), "b": 1 - np.exp(-t)}, index=t)
    return po.EstimationProblem(
        states=["a", "b"], parameters=[po.Parameter("k", 0.8)],
        rhs=lambda x, u, t: [-u.k * x.a, u.k * x.a], initial={"a": 1.0, "b": 0.0},
        data=data, **kw)


def long_data():
    return pd.DataFrame({"time": [1.0, 2.0, 1.0], "name": ["a", "a", "b"],
                         "value": [0.4, 0.1, 0.6]})


def _frame(**cols):
    return pd.DataFrame(cols, index=T6[:len(next(iter(cols.values())))])


# ---------------------------------------------------------------------------
# errors: (id, callable, exception type, regex the message must match)
# ---------------------------------------------------------------------------
ERRORS = [
    # --- data -------------------------------------------------------------
    ("data_not_frame", lambda: decay(data=[[0.5, 1.0]]), po.ProblemError, "DataFrame"),
    ("data_empty", lambda: decay(data=pd.DataFrame()), po.ProblemError, "empty"),
    ("data_empty_rows", lambda: decay(data=pd.DataFrame({"x": []})), po.ProblemError, "empty"),
    ("data_all_nan", lambda: decay(data=_frame(x=[np.nan] * 3)), po.ProblemError, "no measurement"),
    ("data_inf", lambda: decay(data=_frame(x=[1.0, np.inf, 0.5])), po.ProblemError,
     "'x' at t=1.0 is infinite"),
    ("data_nonnumeric_cell_wide", lambda: decay(data=_frame(x=[1.0, "abc", 0.5])),
     po.ProblemError, r"column 'x'.*row 1.*'abc'"),
    ("data_nonnumeric_cell_long", lambda: two_state(data=long_data().assign(
        value=["0.4", "n/a", "0.6"])), po.ProblemError, r"column 'value'.*row 1.*'n/a'"),
    ("data_nonnumeric_time", lambda: decay(data=pd.DataFrame({"x": [1.0, 0.5]}, index=["a", "b"])),
     po.ProblemError, r"index \(time\).*'a'"),
    ("data_duplicate_times", lambda: decay(data=pd.DataFrame({"x": [1.0, 0.9]}, index=[1.0, 1.0])),
     po.ProblemError, "duplicates"),
    ("data_unsorted_times", lambda: decay(data=pd.DataFrame({"x": [1.0, 0.9]}, index=[2.0, 1.0])),
     po.ProblemError, "sorted"),
    ("data_nan_time", lambda: decay(data=pd.DataFrame({"x": [1.0, 0.9]}, index=[1.0, np.nan])),
     po.ProblemError, "non-finite time"),
    ("data_before_t0", lambda: decay(data=pd.DataFrame({"x": [1.0]}, index=[-1.0]), T=3.0),
     po.ProblemError, r"\[t0, T\] = \[0.0, 3.0\]"),
    ("data_only_before_t0", lambda: decay(data=pd.DataFrame({"x": [1.0]}, index=[-1.0])),
     po.ProblemError, r"T=-1.0 must be finite and > t0=0.0"),
    ("data_unknown_column", lambda: decay(data=_frame(y=[1.0, 0.5])), po.ProblemError,
     r"\['y'\] name no observed"),
    ("data_duplicate_columns", lambda: decay(data=pd.DataFrame([[1.0, 1.0]], index=[1.0],
                                                               columns=["x", "x"])),
     po.ProblemError, "duplicate columns"),
    ("long_duplicate", lambda: two_state(data=pd.concat([long_data(), long_data().iloc[:1]])),
     po.ProblemError, "duplicate measurement of a at t=1.0"),
    ("long_missing_value", lambda: two_state(data=long_data().assign(value=[0.4, np.nan, 0.6])),
     po.ProblemError, "row 1"),
    # --- sigma and weights --------------------------------------------------
    ("weights_zero_scalar", lambda: decay(weights=0.0), po.ProblemError, "weights are zero"),
    ("weights_zero_frame", lambda: decay(weights=pd.DataFrame({"x": np.zeros(6)}, index=T6)),
     po.ProblemError, "weights are zero"),
    ("weights_negative", lambda: decay(weights=-1.0), po.ProblemError, "non-negative"),
    ("sigma_negative", lambda: decay(sigma=-0.1), po.ProblemError, "positive"),
    ("sigma_zero", lambda: decay(sigma=0.0), po.ProblemError, "positive"),
    ("sigma_nan", lambda: decay(sigma=np.nan), po.ProblemError, "missing"),
    ("sigma_and_weights", lambda: decay(sigma=0.1, weights=1.0), po.ProblemError, "either"),
    ("sigma_wrong_shape", lambda: decay(sigma=np.ones((2, 2))), po.ProblemError,
     r"shape \(2, 2\).*one value per observable"),
    ("sigma_wrong_length", lambda: two_state(sigma=[0.1, 0.2, 0.3]), po.ProblemError,
     r"shape \(3,\)"),
    ("sigma_string", lambda: decay(sigma="big"), po.ProblemError, "sigma must be a number"),
    ("sigma_mapping_string", lambda: decay(sigma={"x": "0.1"}), po.ProblemError,
     r"sigma\['x'\] must be a number"),
    ("sigma_unknown_name", lambda: decay(sigma={"y": 0.1}), po.ProblemError, r"\['y'\]"),
    # --- declaration ----------------------------------------------------------
    ("bounds_lb_gt_ub", lambda: po.Parameter("k", 1.0, lb=2.0, ub=1.0), po.ProblemError,
     "lb=2.0 > ub=1.0"),
    ("param_value_nan", lambda: po.Parameter("k", np.nan), po.ProblemError, "not finite"),
    ("param_start_below_lb", lambda: po.Parameter("k", -1.0, lb=0.0), po.ProblemError,
     "start value -1.0 is outside its bounds"),
    ("param_start_above_ub", lambda: po.Parameter("k", 3.0, ub=2.0), po.ProblemError,
     "outside its bounds"),
    ("param_name_not_identifier", lambda: po.Parameter("k 1"), po.ProblemError, "identifier"),
    ("state_param_clash", lambda: decay(name="x"), po.ProblemError, "both as state and parameter"),
    ("duplicate_states", lambda: po.EstimationProblem(
        states=["x", "x"], parameters=["k"], rhs=lambda x, u, t: [x.x, x.x],
        initial={"x": 1.0}, data=decay_data()), po.ProblemError, "duplicate state"),
    ("rhs_wrong_count", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [x.x, u.k],
        initial={"x": 1.0}, data=decay_data()), po.ProblemError, "returned 2 expressions"),
    ("rhs_unknown_state", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [x.y],
        initial={"x": 1.0}, data=decay_data()), AttributeError, "no state named 'y'"),
    ("initial_missing", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [-x.x], initial={},
        data=decay_data()), po.ProblemError, r"missing states \['x'\]"),
    ("initial_unknown_param", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [-x.x], initial={"x": "x0"},
        data=decay_data()), po.ProblemError, "names no parameter"),
    ("T_before_t0", lambda: decay(T=0.2), po.ProblemError, r"\[t0, T\]|T=0.2"),
    ("t0_nan", lambda: decay(t0=np.nan), po.ProblemError, "t0 must be finite"),
    ("loss_unknown", lambda: decay(loss="l1"), po.ProblemError, "loss must be"),
    ("rhs_nonfinite_at_start", lambda: po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", -1.0)],
        rhs=lambda x, u, t: [pyo.log(u.k) * x.x], initial={"x": 1.0}, data=decay_data()),
     po.ProblemError, "not finite at the initial state"),
    # --- estimator arguments (checked before anything is built) ------------------
    ("u0_short_simultaneous", lambda: po.estimate_simultaneous(two_param(), u0=[5.0]),
     po.ProblemError, r"u0 has 1 value.*2: \['a', 'b'\]"),
    ("u0_short_reduced", lambda: po.estimate_reduced(two_param(), u0=[5.0]), po.ProblemError,
     "u0 has 1 value"),
    ("u0_long_shooting", lambda: po.estimate_multiple_shooting(two_param(), u0=[1, 2, 3]),
     po.ProblemError, "u0 has 3 value"),
    ("u0_nan", lambda: po.estimate_reduced(decay(), u0=[np.nan]), po.ProblemError, "not finite"),
    ("u0_text", lambda: po.estimate_reduced(decay(), u0=["a"]), po.ProblemError, "u0 must be numbers"),
    ("u0_outside_bounds", lambda: po.estimate_reduced(decay(lb=0.0, ub=5.0), u0=[7.0]),
     po.ProblemError, r"outside its bounds \[0.0, 5.0\]"),
    ("gradient_unknown", lambda: po.estimate_reduced(decay(), gradient="magic"), po.ProblemError,
     r"unknown gradient 'magic'.*'adjoint'"),
    ("hessian_unknown", lambda: po.estimate_reduced(decay(), hessian="bfgs"), po.ProblemError,
     "unknown hessian 'bfgs'"),
    ("optimizer_unknown", lambda: po.estimate_reduced(decay(), optimizer="newton"),
     po.ProblemError, "unknown optimizer 'newton'"),
    ("continuous_gradient_unknown", lambda: po.estimate_continuous(decay(), gradient="magic"),
     po.ProblemError, "unknown gradient 'magic'"),
    ("continuous_method_unknown", lambda: po.estimate_continuous(decay(), method="euler"),
     po.ProblemError, "unknown method 'euler'"),
    ("shooting_formulation_unknown", lambda: po.estimate_multiple_shooting(
        decay(), formulation="matrix"), po.ProblemError, "unknown formulation"),
    ("init_unknown", lambda: po.estimate_simultaneous(decay(), init="zeros"), po.ProblemError,
     "unknown init 'zeros'"),
    ("scheme_unknown", lambda: po.estimate_simultaneous(decay(), scheme="rk4"), po.ProblemError,
     r"unknown scheme 'rk4'.*adams_pc"),
    ("scheme_unknown_reduced", lambda: po.estimate_reduced(decay(), scheme="euler"),
     po.ProblemError, "unknown scheme"),
    ("qmax_zero", lambda: po.estimate_simultaneous(decay(), qmax=0), po.ProblemError,
     r"qmax must be an integer in \[2, 8\], got 0"),
    ("qmax_99", lambda: po.estimate_reduced(decay(), qmax=99), po.ProblemError, r"\[2, 8\]"),
    ("qmax_float", lambda: po.estimate_reduced(decay(), qmax=2.5), po.ProblemError, "integer"),
    ("steps_zero", lambda: po.estimate_simultaneous(decay(), steps_per_interval=0),
     po.ProblemError, "steps_per_interval must be an integer >= 1, got 0"),
    ("steps_fraction", lambda: po.estimate_reduced(decay(), steps_per_interval=2.5),
     po.ProblemError, "steps_per_interval"),
    ("steps_bool", lambda: po.estimate_reduced(decay(), steps_per_interval=True),
     po.ProblemError, "steps_per_interval"),
    ("max_step_negative", lambda: po.estimate_simultaneous(decay(), max_step=-1),
     po.ProblemError, "max_step must be a positive finite number"),
    ("max_step_nan", lambda: po.estimate_reduced(decay(), max_step=np.nan), po.ProblemError,
     "max_step"),
    ("grid_and_steps", lambda: po.estimate_reduced(
        decay(), grid=po.make_grid(T6, T=3.0), steps_per_interval=3), po.ProblemError,
     "either grid or"),
    ("grid_wrong_type", lambda: po.estimate_reduced(decay(), grid=np.linspace(0, 3, 7)),
     TypeError, "grid must be a pyomo_odeest.Grid"),
    ("options_not_dict", lambda: po.estimate_simultaneous(decay(), options=["tol", 1e-6]),
     po.ProblemError, "options must be a dict"),
    ("options_max_iter_negative", lambda: po.estimate_reduced(decay(), options={"max_iter": -1}),
     po.ProblemError, r"options\['max_iter'\]"),
    ("options_tol_zero", lambda: po.estimate_simultaneous(decay(), options={"tol": 0}),
     po.ProblemError, r"options\['tol'\]"),
    ("tee_text", lambda: po.estimate_reduced(decay(), tee="loud"), po.ProblemError, "tee must be"),
    ("all_fixed_reduced", lambda: po.estimate_reduced(fixed_only()), po.ProblemError,
     "fixed: nothing to estimate"),
    ("all_fixed_continuous", lambda: po.estimate_continuous(fixed_only()), po.ProblemError,
     "fixed"),
    ("no_parameters", lambda: po.estimate_reduced(po.EstimationProblem(
        states=["x"], parameters=[], rhs=lambda x, u, t: [-x.x], initial={"x": 2.0},
        data=decay_data())), po.ProblemError, "no parameter"),
    ("no_data", lambda: po.estimate_simultaneous(po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0},
        data=None, T=3.0)), po.ProblemError, "no data"),
    ("problem_wrong_type", lambda: po.estimate_reduced("model.py"), TypeError,
     "problem must be an EstimationProblem"),
    ("front_door_unknown_approach", lambda: po.estimate(decay(), "bayesian"), ValueError,
     "unknown approach 'bayesian'"),
    ("front_door_unknown_option", lambda: po.estimate(decay(), "reduced_space", nodes=3),
     TypeError, r"does not take option\(s\) \['nodes'\]"),
    ("front_door_bad_gradient", lambda: po.estimate(decay(), "reduced_space", gradient="magic"),
     po.ProblemError, "unknown gradient"),
    ("front_door_adaptive_u0", lambda: po.estimate(decay(), "adaptive", u0=[1.0, 2.0]),
     po.ProblemError, "u0 has 2"),
    # --- NaN or infinite numbers in an expression: refused, never a dropped row ---
    ("nan_path_constraint_simultaneous", lambda: po.estimate(decay(constraints=[po.PathConstraint(
        "c", lambda x, u, t: x.x - float("nan"))]), "simultaneous"), po.ProblemError,
     "path constraint 'c' contains a NaN"),
    ("nan_times_state_path_constraint", lambda: decay(constraints=[po.PathConstraint(
        "c", lambda x, u, t: x.x * float("nan") - 5)]), po.ProblemError, "'c' contains a NaN"),
    ("inf_path_constraint", lambda: decay(constraints=[po.PathConstraint(
        "c", lambda x, u, t: x.x - float("inf"))]), po.ProblemError, "NaN or infinite"),
    ("nan_parameter_constraint", lambda: decay(constraints=[po.ParameterConstraint(
        "r", lambda u: u.k - float("nan"))]), po.ProblemError, "parameter constraint 'r' contains"),
    ("nan_in_rhs", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [-u.k * x.x + np.nan],
        initial={"x": 2.0}, data=decay_data()), po.ProblemError, r"rhs\[x\] contains a NaN"),
    ("nan_in_observe", lambda: decay(observe=lambda x, u, t: {"x": x.x * np.nan}),
     po.ProblemError, r"observe\[x\] contains a NaN"),
    ("nan_in_penalty", lambda: decay(penalty=lambda u: (u.k - np.nan) ** 2), po.ProblemError,
     "penalty contains a NaN"),
    ("nan_in_initial", lambda: po.EstimationProblem(
        states=["x"], parameters=["k"], rhs=lambda x, u, t: [-u.k * x.x],
        initial={"x": lambda u: u.k * np.nan}, data=decay_data()), po.ProblemError,
     r"initial\[x\] contains a NaN"),
    # --- user functions that cannot take the symbolic states ---------------------
    ("np_exp_of_state", lambda: _rhs(lambda x, u, t: [-u.k * np.exp(x.x)]), po.ProblemError,
     r"rhs applies a numpy function.*pyo\.exp"),
    ("np_sqrt_of_parameter", lambda: _rhs(lambda x, u, t: [-np.sqrt(u.k) * x.x]),
     po.ProblemError, "numpy function"),
    ("np_exp_of_time", lambda: _rhs(lambda x, u, t: [-u.k * np.exp(t) * x.x]), po.ProblemError,
     "numpy function"),
    ("math_log_of_state", lambda: _rhs(lambda x, u, t: [-u.k * __import__("math").log(x.x)]),
     po.ProblemError, "needs a plain number.*pyo"),
    ("python_max_of_state", lambda: _rhs(lambda x, u, t: [-u.k * max(x.x, 0)]), po.ProblemError,
     r"compares a state.*smooth"),
    ("if_on_state", lambda: _rhs(lambda x, u, t: [-u.k * x.x if x.x > 0 else 0]),
     po.ProblemError, "compares a state"),
    ("np_exp_in_path_constraint", lambda: decay(constraints=[po.PathConstraint(
        "c", lambda x, u, t: np.exp(x.x) - 9)]), po.ProblemError,
     "path constraint 'c' applies a numpy function"),
    ("np_exp_in_observe", lambda: decay(observe=lambda x, u, t: {"x": np.exp(x.x)}),
     po.ProblemError, "observe applies a numpy function"),
    ("rhs_wrong_signature", lambda: _rhs(lambda x, u: [-u.k * x.x]), po.ProblemError,
     "rhs failed on the symbolic states.*TypeError"),
    # --- time index that is not numbers ----------------------------------------
    ("data_datetime_index", lambda: decay(data=pd.DataFrame(
        {"x": [1.0, 0.5]}, index=pd.to_datetime(["2020-01-01", "2020-01-02"]))),
     po.ProblemError, r"data index \(time\) holds dates.*pd.Timedelta"),
    ("data_timedelta_index", lambda: decay(data=pd.DataFrame(
        {"x": [1.0, 0.5]}, index=pd.to_timedelta([1, 2], unit="D"))), po.ProblemError,
     "holds dates or durations"),
    ("long_datetime_time", lambda: two_state(data=long_data().assign(
        time=pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-01"]))), po.ProblemError,
     "data column 'time' holds dates"),
    # --- infeasible before any solve -----------------------------------------------
    ("path_violated_at_fixed_initial_state", lambda: decay(constraints=[po.PathConstraint(
        "c", lambda x, u, t: x.x - 1.5)]), po.ProblemError,
     r"path constraint 'c' is violated at t0=0.0 by the initial state \(c = 0.5 > 0\).*infeasible"),
    ("path_violated_at_t0_measured", lambda: decay(
        data=pd.DataFrame({"x": [2.0, 1.0]}, index=[0.0, 1.0]),
        constraints=[po.PathConstraint("c", lambda x, u, t: x.x + t - 1.0, at="measurements")]),
     po.ProblemError, "violated at t0"),
    ("preequilibration_without_steady_state", lambda: po.estimate(po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", 0.5)], rhs=lambda x, u, t: [u.k],
        initial={"x": 1.0}, data=decay_data(), preequilibration=po.Preequilibration()),
        "reduced_space"), po.SteadyStateError, r"no steady state of the pre-equilibration.*rest"),
    # --- size guard -------------------------------------------------------------
    ("too_large", lambda: po.estimate_simultaneous(decay(), steps_per_interval=10 ** 9),
     ProblemTooLargeError, r"too large.*steps_per_interval <= \d+"),
    ("too_large_reduced", lambda: po.estimate_reduced(decay(), max_step=1e-10),
     ProblemTooLargeError, "steps fit"),
]


def _rhs(rhs):
    return po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 0.7)], rhs=rhs,
                                initial={"x": 2.0}, data=decay_data())


def two_param():
    return po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("a", 0.5), po.Parameter("b", 0.5)],
        rhs=lambda x, u, t: [-u.a * x.x + u.b], initial={"x": 2.0}, data=decay_data())


def fixed_only():
    return po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", 1.0, fixed=True)],
        rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0}, data=decay_data())


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_input_raises_clear_error(case):
    _, fn, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        fn()


def test_dae_model_without_derivative_is_refused():
    from pyomo.dae import ContinuousSet
    from pyomo_odeest import DaeSchemeError
    m = pyo.ConcreteModel()
    m.t = ContinuousSet(bounds=(0, 1))
    m.x = pyo.Var(m.t)
    with pytest.raises(DaeSchemeError, match="no DerivativeVar with respect to ContinuousSet 't'"):
        pyo.TransformationFactory("odeest.adams").apply_to(m)


# ---------------------------------------------------------------------------
# inputs that are valid in another spelling: accepted, with the right meaning
# ---------------------------------------------------------------------------
ACCEPTED = [
    ("sigma_per_observable_list", lambda: two_state(sigma=[0.1, 0.5]),
     np.array([[100.0, 4.0]] * 3)),
    ("sigma_per_observable_array", lambda: two_state(sigma=np.array([0.1, 0.5])),
     np.array([[100.0, 4.0]] * 3)),
    ("sigma_series", lambda: two_state(sigma=pd.Series({"a": 0.1, "b": 0.5})),
     np.array([[100.0, 4.0]] * 3)),
    ("sigma_array_data_shape", lambda: two_state(sigma=np.array([[1, 2], [1, 2], [1, 2.0]])),
     np.array([[1.0, 0.25]] * 3)),
    ("weights_array_data_shape", lambda: two_state(weights=np.arange(6.0).reshape(3, 2) + 1),
     np.arange(6.0).reshape(3, 2) + 1),
    ("numeric_strings_in_csv", lambda: decay(data=_frame(x=["1.0", "0.5", ""])),
     np.array([[1.0], [1.0]])),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_other_spellings_accepted(case):
    _, fn, weights = case
    prob = fn()
    np.testing.assert_allclose(prob.weights, weights)


# ---------------------------------------------------------------------------
# names: no user name meets an internal symbol
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("names", [("t", "x"), ("E", "pi"), ("I", "exp"), ("N", "S"), ("u", "t"),
                                   ("numpy", "math"), ("lam0", "_xi0"), ("lambda_", "E")],
                         ids=lambda n: "-".join(n))
def test_user_names_never_meet_internal_symbols(names):
    """Parameter ``p`` and state ``s`` named like time, sympy constants or functions:
    ``s' = -p s + t`` must stay that function (time ``t`` separate from a parameter ``t``)."""
    p, s = names
    if p == s:
        pytest.skip("same name")
    prob = po.EstimationProblem(
        states=[s], parameters=[po.Parameter(p, 0.7)],
        rhs=lambda x, u, t: [-u[p] * x[s] + t + pyo.exp(0 * x[s])], initial={s: 2.0},
        data=pd.DataFrame({s: [1.0, 0.5]}, index=[1.0, 2.0]))
    assert len(prob.f_sym[0].free_symbols) == 3
    f = prob.numeric_rhs()
    assert f([2.0], [3.0], 0.25)[0] == pytest.approx(-3.0 * 2.0 + 0.25 + 1.0)


def test_parameter_named_t_is_estimated():
    """The issue's case: a parameter named ``t`` was merged with time (0.5 and 1.43 for a true 1)."""
    prob = decay(name="t", start=0.5)
    for res in (po.estimate_simultaneous(prob), po.estimate_reduced(prob)):
        assert res.success
        assert res.estimates["t"] == pytest.approx(1.0, abs=1e-3)


# ---------------------------------------------------------------------------
# results: wrong answers are not reported as silent successes
# ---------------------------------------------------------------------------
def test_iteration_limit_reported_with_advice():
    res = po.estimate_reduced(decay(start=0.1), options={"max_iter": 1})
    assert not res.success and res.status is po.Status.MAX_ITERATIONS
    assert any("not converged" in w and "L-BFGS" in w for w in res.warnings)
    assert "WARNING: not converged" in res.summary()


def test_parameter_at_bound_warned_and_inside_bounds():
    res = po.estimate_simultaneous(decay(ub=0.5, start=0.4))
    assert res.estimates["k"] <= 0.5
    assert res.estimates["k"] == pytest.approx(0.5, abs=1e-6)
    assert any("upper bound 0.5" in w for w in res.warnings)


@pytest.mark.parametrize("approach", ["continuous", "reduced_space"])
def test_a_small_parameter_near_zero_is_not_called_at_its_bound(approach):
    """x' = -k·1e12·x with k = 5e-13 and lb = 0: k is within 1e-6 of its bound, but the
    data determine it (the Gauss–Newton step without the bound stays above 0), so no
    warning says the bound holds it; with ub = 4e-13 the bound does hold it."""
    t = np.linspace(0, 4, 21)
    data = pd.DataFrame({"x": 2.0 * np.exp(-0.5 * t)}, index=t)

    def problem(ub=None):
        return po.EstimationProblem(["x"], [po.Parameter("k", 1e-13, lb=0.0, ub=ub)],
                                    rhs=lambda x, u, t: [-u.k * 1e12 * x.x],
                                    initial={"x": 2.0}, data=data, sigma=0.01)
    free = po.estimate(problem(), approach)
    assert free.success and free.estimates["k"] == pytest.approx(5e-13, rel=1e-4)
    assert not any("bound" in w for w in free.warnings), free.warnings
    held = po.estimate(problem(ub=4e-13), approach)
    assert any("upper bound 4e-13" in w for w in held.warnings), held.warnings


def test_chi_square_against_the_stated_noise():
    data = decay_data(noise=0.01, seed=3)
    right = po.estimate_reduced(decay(data=data, sigma=0.01))
    assert right.success and not right.warnings
    small = po.estimate_reduced(decay(data=data, sigma=1e-4))
    assert any("misfit inconsistent with the noise level" in w for w in small.warnings)
    large = po.estimate_reduced(decay(data=data, sigma=10.0))
    assert any("misfit smaller than the noise level explains" in w for w in large.warnings)


def test_fewer_measurements_than_parameters():
    prob = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("a", 0.5), po.Parameter("b", 0.5)],
        rhs=lambda x, u, t: [-u.a * x.x + u.b], initial={"x": 2.0},
        data=pd.DataFrame({"x": [1.0]}, index=[1.0]))
    res = po.estimate_reduced(prob, hessian=None)
    assert any("1 measurements for 2 free parameters" in w for w in res.warnings)


def test_numerically_rank_deficient():
    """x' = -(a + b) x: only a + b is identifiable."""
    prob = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("a", 0.3), po.Parameter("b", 0.4)],
        rhs=lambda x, u, t: [-(u.a + u.b) * x.x], initial={"x": 2.0}, data=decay_data())
    res = po.estimate_reduced(prob, hessian=None)
    assert any("rank-deficient" in w and "a" in w and "b" in w for w in res.warnings)


def stiff_problem():
    """x' = -k (x - cos t), k = 50, measured every 0.2: h k = 10 at one step per interval."""
    from scipy.integrate import solve_ivp
    t = np.round(np.arange(0.2, 2.01, 0.2), 10)
    sol = solve_ivp(lambda tt, x: -50.0 * (x - np.cos(tt)), (0, 2), [0.0], method="Radau",
                    t_eval=t, rtol=1e-10, atol=1e-12)
    return po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", 40.0, lb=0.0)],
        rhs=lambda x, u, t: [-u.k * (x.x - pyo.cos(t))], initial={"x": 0.0},
        data=pd.DataFrame({"x": sol.y[0]}, index=t))


def test_stiff_problem_beyond_the_stability_region_is_warned():
    prob = stiff_problem()
    res = po.estimate_reduced(prob, scheme="adams_pc", steps_per_interval=1, hessian=None,
                              certify=False)                 # this grid's optimum
    assert any(w.startswith("stiff") and "enright" in w for w in res.warnings)
    assert res.estimates["k"] == pytest.approx(13.0, abs=0.1)     # pinned at the limit
    ok = po.estimate_simultaneous(prob, scheme="enright", steps_per_interval=1, certify=False)
    assert not any(w.startswith("stiff") for w in ok.warnings)


def test_discrete_optimum_that_the_ode_does_not_have_is_flagged():
    """cos(t) data, start ω = 3: on two Adams PC steps per interval (h = 0.25) the
    discrete fit ends at ω ≈ 4.2 with an objective the ODE does not have there
    (the oscillation is mis-resolved); the re-simulated objective disagrees by far
    and the result says so.  On a fine grid the two agree and nothing is flagged."""
    from pyomo_odeest.approaches import ContinuousModel
    from pyomo_odeest.models import oscillator_problem
    prob = oscillator_problem(omega0=3.0)
    bad = po.estimate_reduced(prob, scheme="adams_pc", steps_per_interval=2, certify=False)
    assert bad.success
    sim = ContinuousModel(prob, rtol=1e-10, atol=1e-12).objective(bad.x)
    assert bad.extra["simulated_objective"] == pytest.approx(sim, rel=1e-6)
    assert abs(sim - bad.objective) > 0.3 * bad.objective
    assert any(w.startswith("discretization error") for w in bad.warnings)
    assert "discretization error" in bad.summary()
    good = po.estimate_reduced(prob, scheme="adams_pc", steps_per_interval=20, certify=False)
    assert good.extra["simulated_objective"] == pytest.approx(good.objective, rel=1e-4)
    assert not any(w.startswith("discretization error") for w in good.warnings)
    # with the grid certificate (the default) the same first grid is refined until the
    # fit is the ODE's: no discrete optimum that the ODE does not have is reported
    cert = po.estimate_reduced(prob, scheme="adams_pc", steps_per_interval=2)
    assert not cert.success or cert.extra["certificate"]["certified"]
    if cert.success:
        assert cert.extra["simulated_objective"] == pytest.approx(cert.objective, rel=1e-3)


@pytest.mark.parametrize("scheme, z, expected", [
    (AdamsPC(2), -1.0, 0.5),                                          # Heun: 1 + z + z²/2
    (AdamsMoulton(2), -1.0, 1 / 3),                                   # trapezoid
    (AdamsMoulton(2), 2j, 1.0),                                       # A-stable: |R(iy)| = 1
    (Enright(2), -1.0, (2 / 3) / (1 + 2 / 3 + 1 / 6)),                # (1 + z/3)/(1 - 2z/3 + z²/6)
])
def test_amplification_of_one_step_members(scheme, z, expected):
    assert amplification(scheme, z) == pytest.approx(expected, rel=1e-12)


def test_stability_regions_from_the_schemes():
    """Explicit predictor-corrector and the semi-implicit variant (its predictor is
    explicit): bounded real intervals; implicit Enright: stable far out on the
    negative axis (stiff)."""
    for sch in (AdamsPC(4), SemiImplicitEnright(4)):
        assert amplification(sch, -0.5) < 1 < amplification(sch, -10.0)
    assert amplification(Enright(4), -10.0) < 1 and amplification(Enright(4), -1000.0) < 1


def test_repeated_evaluation_errors_stop_ipopt():
    from pyomo_odeest.approaches._reduced import _FailureWatch

    class Fake:
        counts = {"failures": 0}
    nlp = Fake()
    watch = _FailureWatch(nlp, streak=3)
    assert watch() is True
    for _ in range(3):
        nlp.counts["failures"] += 1
        assert watch() is True or watch.stopped
    nlp.counts["failures"] += 1
    assert watch() is False and watch.stopped


def test_size_estimate_and_largest_grid_that_fits():
    prob = decay()
    est = estimate_size(prob, "simultaneous", "adams_pc", None, None, None, 10)
    assert est.steps == 60 and est.unknowns == 61 + 60 + 1 and est.constraints == 2 * 60 + 1
    avail = 200 * est.bytes
    with pytest.raises(ProblemTooLargeError, match=r"steps_per_interval <= (\d+)") as info:
        estimate_size(prob, steps_per_interval=10_000, refuse=True, available=avail)
    import re
    spi = int(re.search(r"steps_per_interval <= (\d+)", str(info.value)).group(1))
    assert estimate_size(prob, steps_per_interval=spi, refuse=True, available=avail).fits
    assert not estimate_size(prob, steps_per_interval=spi + 2, available=avail).fits


def test_bad_inputs_leave_the_next_run_identical():
    prob = decay()
    first = po.estimate_reduced(prob, hessian=None)
    for case in ERRORS[:60:7]:
        with pytest.raises(case[2]):
            case[1]()
    again = po.estimate_reduced(prob, hessian=None)
    assert first.x.tolist() == again.x.tolist() and first.objective == again.objective


def test_diagnose_runs_once():
    res = po.estimate_reduced(decay(ub=0.5, start=0.4), hessian=None)
    n = len(res.warnings)
    assert diagnose(decay(ub=0.5, start=0.4), res) is res and len(res.warnings) == n


def test_lbfgs_abnormal_line_search_at_a_stationary_point():
    """L-BFGS-B's 'ABNORMAL' at the optimum is convergence only when the projected
    gradient vanishes (a bound-active component with an outward gradient counts as 0)."""
    from types import SimpleNamespace
    from pyomo_odeest.approaches._reduced import _stationary
    nlp = SimpleNamespace(x_lb=np.array([0.0, -np.inf]), x_ub=np.array([np.inf, np.inf]))
    msg = "ABNORMAL_TERMINATION_IN_LNSRCH"
    at_opt = SimpleNamespace(x=np.array([0.0, 1.0]), jac=np.array([5.0, 1e-9]), fun=2.0)
    status, message = _stationary(nlp, at_opt, msg)
    assert status is po.Status.CONVERGED and "stationary point" in message
    away = SimpleNamespace(x=np.array([0.0, 1.0]), jac=np.array([-5.0, 1e-9]), fun=2.0)
    assert _stationary(nlp, away, msg) == (po.Status.FAILED, msg)


def test_stiffness_is_checked_per_experiment():
    """Two experiments of the stiff problem, one sampled coarsely (h k = 10 at one step per
    interval) and one finely (h k = 2.5): only the coarse one is beyond the stability region
    of Adams PC, and the warning names it.  The reduced space ends pinned at the stability
    limit (k = 13) and is warned both as stiff and by the independent simulation; the
    simultaneous block ends at another discrete optimum (k = 7.6) that the simulation check
    flags."""
    from scipy.integrate import solve_ivp

    def data(dt):
        t = np.round(np.arange(dt, 2.0 + 1e-9, dt), 10)
        sol = solve_ivp(lambda tt, x: -50.0 * (x - np.cos(tt)), (0, 2), [0.0], method="Radau",
                        t_eval=t, rtol=1e-10, atol=1e-12)
        return pd.DataFrame({"x": sol.y[0]}, index=t)

    prob = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", 40.0, lb=0.0)],
        rhs=lambda x, u, t: [-u.k * (x.x - pyo.cos(t))], initial={"x": 0.0}, data=None,
        experiments=[po.Experiment("coarse", data(0.2)), po.Experiment("fine", data(0.05))])
    res = po.estimate(prob, "reduced_space", scheme="adams_pc", steps_per_interval=1,
                      certify=False)                         # this grid's optimum
    assert res.estimates["k"] == pytest.approx(13.0, abs=0.1)
    stiff = [w for w in res.warnings if "stiff: at t=" in w]
    assert stiff and all(w.startswith("experiment 'coarse': stiff") for w in stiff), res.warnings
    assert any(w.startswith("discretization error") for w in res.warnings)
    sim = po.estimate(prob, "simultaneous", scheme="adams_pc", steps_per_interval=1,
                      certify=False)
    assert any(w.startswith("discretization error") for w in sim.warnings)
    assert all(w.startswith("experiment 'coarse'") for w in sim.warnings if "stiff: at t=" in w)
    ok = po.estimate(prob, "simultaneous", scheme="enright", steps_per_interval=1, certify=False)
    assert not any("stiff: at t=" in w for w in ok.warnings)


def test_parameter_fixed_by_equal_bounds_is_said_once():
    prob = decay(lb=0.7, ub=0.7)
    for approach in ("reduced_space", "simultaneous"):
        res = po.estimate(prob, approach)
        assert res.estimates["k"] == 0.7
        bw = [w for w in res.warnings if "'k'" in w]
        assert len(bw) == 1 and "lb = ub = 0.7" in bw[0], res.warnings


# ---------------------------------------------------------------------------
# the Dask runner: a task that kills its worker, a function that does not pickle
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dask_runner():
    pytest.importorskip("distributed")
    import dask
    from pyomo_odeest.runner import Runner
    # workers forked from this process (already importing everything): a killed
    # worker is back in about a second, not after a fresh interpreter's imports
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        with Runner(n_workers=2, progress=False) as rn:
            yield rn


def _killers():
    """Tasks that end their own worker process in three ways (defined here, so
    they are pickled by value)."""
    import os
    import signal
    import time

    def exit_now(i):
        if i == 3:
            os._exit(1)
        time.sleep(0.2)
        return 10 * i

    def sigkill(i):
        if i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.2)
        return 10 * i

    def segfault(i):
        if i == 3:
            import ctypes
            ctypes.string_at(0)
        time.sleep(0.2)
        return 10 * i
    return {"os._exit": exit_now, "SIGKILL": sigkill, "segfault": segfault}


@pytest.mark.extras
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_task_that_kills_its_worker_is_the_culprit_and_the_others_come_back(dask_runner):
    """6 tasks on 2 workers, task 3 ends its worker process: in every one of 10 runs
    the 5 healthy results come back, task 3's row names it as the culprit and
    ``run.complete`` is False (ten runs of os._exit, plus SIGKILL and a segfault)."""
    kinds = _killers()
    order = ["os._exit"] * 8 + ["SIGKILL", "segfault"]
    for run_no, kind in enumerate(order):
        dask_runner.client.wait_for_workers(2, timeout=300)   # the killed worker is back
        run = dask_runner.map(kinds[kind], range(6))
        tab = run.table.set_index("task")
        healthy = tab.drop(index=3)
        assert (healthy["status"] == "done").all(), (run_no, kind, tab[["status", "error"]])
        assert list(healthy["value"]) == [0, 10, 20, 40, 50]
        assert tab.loc[3, "status"] == "error" and "killed its worker" in tab.loc[3, "error"]
        assert not run.complete


@pytest.mark.extras
def test_an_unpicklable_task_is_named_before_anything_runs(dask_runner):
    import threading
    from pyomo_odeest.runner import Task
    lock = threading.Lock()

    def locked(x):
        with lock:
            return x

    with pytest.raises(TypeError, match=r"task 0 cannot be sent to the Dask workers: the "
                                        r"function .*locked.* cannot be pickled.*lock"):
        dask_runner.map(locked, [1, 2])
    with pytest.raises(TypeError, match=r"argument 1 cannot be pickled"):
        dask_runner.run([Task(max, (1, lock))])
    assert list(dask_runner.map(abs, [-1, -2]).table["value"]) == [1, 2]   # still usable


# ---------------------------------------------------------------------------
# names: generated numeric code holds no user name
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["array", "select", "where", "_s0", "_f0", "x0", "Dummy",
                                  "builtins", "range", "float64"])
def test_names_of_generated_code_are_ordinary_parameter_names(name):
    """A parameter named like something in the generated numeric code (numpy's
    ``array``, the renamed symbols ``_s0``, cse's ``x0``) is estimated by every approach."""
    prob = decay(name=name)
    for approach in ("simultaneous", "reduced_space", "multiple_shooting", "continuous"):
        res = po.estimate(prob, approach)
        assert res.success and res.estimates[name] == pytest.approx(1.0, abs=1e-3), approach


def test_an_input_named_like_numpy_is_its_own_function():
    """An input called ``array`` (its function is named after it) next to a parameter
    ``exp``: x' = -exp * array(t) x with array = 1 is the decay."""
    prob = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("exp", 0.7)],
        rhs=lambda x, u, t: [-u.exp * u.array * x.x], initial={"x": 2.0}, data=decay_data(),
        inputs={"array": po.PiecewiseConstant([0.0], [1.0])})
    res = po.estimate(prob, "reduced_space")
    assert res.estimates["exp"] == pytest.approx(1.0, abs=1e-3)


def test_every_numeric_function_is_generated_through_the_renaming_lambdify():
    """No module calls sympy.lambdify itself (its code would share a namespace with
    user names): one source of truth, ``pyomo_odeest.symbolic.lambdify``."""
    import pathlib
    import pyomo_odeest
    root = pathlib.Path(pyomo_odeest.__file__).parent
    raw = [str(p.relative_to(root)) for p in root.rglob("*.py")
           if "sympy.lambdify(" in p.read_text() and p.name != "_lambdify.py"]
    assert raw == []


def test_numeric_text_time_index_is_read_as_numbers():
    """Times given as text ('1.0') are numbers; the values stay with their times."""
    prob = decay(data=pd.DataFrame({"x": [1.0, 0.5]}, index=["1.0", "2.0"]))
    assert prob.meas_times.tolist() == [1.0, 2.0]
    assert prob.data["x"].tolist() == [1.0, 0.5]


# ---------------------------------------------------------------------------
# Pyomo models given to odeest_ipopt: the component at fault is named
# ---------------------------------------------------------------------------
def _pyomo_model():
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2], initialize=1.0)
    m.y = pyo.Var(initialize=2.0, bounds=(0, 10))
    m.c = pyo.Constraint(expr=m.x[1] + m.x[2] >= 1)
    m.o = pyo.Objective(expr=(m.x[1] - 1) ** 2 + (m.x[2] - 2) ** 2 + (m.y - 3) ** 2)
    return m


def _nan_objective(m):
    m.o.deactivate()
    m.o2 = pyo.Objective(expr=(m.x[1] - float("nan")) ** 2 + m.x[2] ** 2)


def _nan_param(m):
    m.p = pyo.Param(initialize=float("nan"), mutable=True, within=pyo.Any)
    m.c2 = pyo.Constraint(expr=m.x[1] * m.p <= 3)


def _nan_fixed(m):
    m.z = pyo.Var()
    m.z.fix(float("nan"), skip_validation=True)
    m.c2 = pyo.Constraint(expr=m.x[1] * m.z <= 3)


PYOMO_ERRORS = [
    ("var_lb_above_ub", lambda m: m.y.setlb(20), r"variable 'y' has lower bound 20 > upper bound 10"),
    ("var_nan_start", lambda m: m.x[1].set_value(float("nan"), skip_validation=True),
     r"variable 'x\[1\]' has the start value nan"),
    ("nan_coefficient", lambda m: setattr(m, "c2", pyo.Constraint(expr=m.x[1] * float("nan") <= 3)),
     "constraint 'c2' contains the non-finite number nan"),
    ("inf_coefficient", lambda m: setattr(m, "c2", pyo.Constraint(expr=m.x[1] * float("inf") <= 3)),
     "constraint 'c2' contains the non-finite number inf"),
    ("nan_param", _nan_param, "constraint 'c2' contains the non-finite number nan"),
    ("nan_fixed_var", _nan_fixed, "constraint 'c2' contains"),
    ("nan_objective", _nan_objective, "objective 'o2' contains the non-finite number nan"),
]


@pytest.mark.parametrize("case", PYOMO_ERRORS, ids=[c[0] for c in PYOMO_ERRORS])
def test_pyomo_model_defect_is_named_before_the_solve(case):
    _, modify, pattern = case
    m = _pyomo_model()
    modify(m)
    with pytest.raises(ValueError, match=pattern):
        pyo.SolverFactory("odeest_ipopt").solve(m)


def test_nan_at_the_start_point_names_the_constraint():
    m = _pyomo_model()
    m.x[1].set_value(-1.0)
    m.c2 = pyo.Constraint(expr=pyo.log(m.x[1]) <= 3)
    res = pyo.SolverFactory("odeest_ipopt").solve(m)
    assert res.solver.termination_condition != pyo.TerminationCondition.optimal
    assert "Not finite at the start point: constraint 'c2'" in res.solver.message


# ---------------------------------------------------------------------------
# memory and bands
# ---------------------------------------------------------------------------
def test_memory_exhaustion_in_callbacks_is_said():
    from pyomo_odeest.nlp import solve_with_ipopt

    class Hungry:
        n, m = 1, 0
        x_lb, x_ub, g_lb, g_ub = np.array([-np.inf]), np.array([np.inf]), np.zeros(0), np.zeros(0)
        x0 = np.array([1.0])

        def objective(self, x):
            return float(x[0] ** 2)

        def gradient(self, x):
            return 2 * x

        def constraints(self, x):
            return np.zeros(0)

        def jacobian_structure(self):
            return np.zeros(0, int), np.zeros(0, int)

        def jacobian(self, x):
            return np.zeros(0)

        def hessian_structure(self):
            return np.array([0]), np.array([0])

        def hessian(self, x, lam, obj_factor=1.0):
            raise MemoryError()
    with pytest.raises(MemoryError, match="ran out of memory while evaluating the NLP"):
        solve_with_ipopt(Hungry())


def test_memory_messages_of_the_linear_solver_are_recognised():
    from pyomo_odeest.nlp._cyipopt_adapter import _memory_exhausted
    assert _memory_exhausted("MUMPS returned INFO(1) = -9 and requires more memory, reallocating.")
    assert not _memory_exhausted("EXIT: Restoration Failed!")


def test_bands_of_an_identifiable_combination_are_finite():
    """x' = -(a + b) x: only a + b is identifiable.  The band of x depends only on
    a + b, so it is finite and equals the band of the problem written with
    k = a + b; the variance of a alone is infinite, that of a + b is k's."""
    data = decay_data(noise=0.01, seed=1)
    prob = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("a", 0.3), po.Parameter("b", 0.4)],
        rhs=lambda x, u, t: [-(u.a + u.b) * x.x], initial={"x": 2.0}, data=data)
    one = po.EstimationProblem(
        states=["x"], parameters=[po.Parameter("k", 0.7)],
        rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0}, data=data)
    res = po.estimate_reduced(prob, hessian=None)
    ref = po.estimate_reduced(one, hessian=None)
    assert res.success and ref.success
    cov = po.covariance(res)
    assert cov.non_identifiable == ["a", "b"]
    var = cov.variance_of(np.array([[1.0, 0.0], [1.0, 1.0]]))
    assert np.isinf(var[0])
    k_var = po.covariance(ref).matrix.iloc[0, 0]
    assert var[1] == pytest.approx(k_var, rel=1e-4)
    bands = po.prediction_bands(res)
    se = bands.se["x"].to_numpy()
    assert np.all(np.isfinite(se)) and se[1:].max() > 0
    np.testing.assert_allclose(se, po.prediction_bands(ref).se["x"].to_numpy(), rtol=1e-4, atol=1e-12)


# ---------------------------------------------------------------------------
# the benchmark suite's command line, compare_approaches' entries, a recursing
# rhs, CVODES's failures: the cause and the remedy, no raw traceback
# ---------------------------------------------------------------------------
def _petab_suite():
    """benchmarks/petab_suite.py as a module."""
    return benchmark_module("petab_suite")


@pytest.mark.parametrize("argv, expected", [
    (["/no/such/folder"], "error: /no/such/folder is not a folder"),
    (["--starts", "0"], "error: starts must be an integer >= 1 (the nominal point is the "
                        "first start; starts - 1 Sobol points follow); got 0"),
    (["--starts", "-3"], "error: starts must be an integer >= 1"),
    (["--grid-points", "0"], "error: grid_points must be an integer >= 1; got 0"),
    (["--spread", "nan"], "error: spread must be a finite number > 0; got nan"),
])
def test_petab_suite_refuses_bad_arguments_in_one_line(argv, expected, capsys, tmp_path):
    suite = _petab_suite()
    assert suite.main(argv + ["--out", str(tmp_path / "r.tsv")]) == 2
    err = capsys.readouterr().err
    assert expected in err.splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "r.tsv").exists()


@pytest.mark.parametrize("entry, match", [
    (("reduced_space", {"max_step": 0.1}),
     r"approaches\[1\] = \('reduced_space', \{'max_step': 0.1\}\) is not an approach name "
     r"\(one of .*\), an approach class or object, or a \(label, approach, options\) "
     r"triple"),
    (("fast", "simultaneous", ["tee"]), r"approaches\[1\] = .*: the options must be a mapping"),
    ((3, "simultaneous", {}), r"approaches\[1\] = .*: the label must be a string"),
    (["a", "b", "c", "d"], r"approaches\[1\] = \['a', 'b', 'c', 'd'\] is not an approach name"),
    (("x", "no_such", {}), r"approaches\[1\]: unknown approach 'no_such'"),
])
def test_compare_approaches_names_a_malformed_entry(entry, match):
    with pytest.raises(ValueError, match=match):
        po.compare_approaches(decay(), ["simultaneous", entry])


def _recursing_rhs(x, u, t):
    return _recursing_rhs(x, u, t)


def test_a_recursing_rhs_is_named_with_its_file():
    with pytest.raises(po.ProblemError, match=r"rhs \(_recursing_rhs, .*test_bad_inputs.py:\d+\) "
                                               r"recursed without end"):
        po.EstimationProblem(
            states=["x"], parameters=["k"], rhs=_recursing_rhs, initial={"x": 2.0},
            data=decay_data())


def test_the_command_line_names_a_model_file_whose_rhs_recurses(tmp_path, capsys):
    from pyomo_odeest.cli import main
    model = tmp_path / "looping.py"
    model.write_text("states = ['x']\nparameters = ['k']\ninitial = {'x': 2.0}\n\n"
                     "def rhs(x, u, t):\n    return rhs(x, u, t)\n")
    data = tmp_path / "data.csv"
    decay_data().rename_axis("time").to_csv(data)
    rc = main([str(model), str(data), "--no-plot", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"rhs (rhs, {model}:5) recursed without end" in err
    assert "the estimation failed" not in err


def test_cvodes_step_limit_advises_tolerances_not_another_start():
    """CVODES's CV_TOO_MUCH_WORK (rtol 1e-14 and a step limit too small for it): the
    message says what happened and to loosen the tolerances or raise the limit; the
    warning does not send the user to another start."""
    pytest.importorskip("casadi")
    from pyomo_odeest.discretization.continuous._cvodes import CvodesModel
    from pyomo_odeest.models import oscillator_problem
    prob = oscillator_problem(omega0=1.2)
    res = po.estimate(prob, "continuous", model=CvodesModel(prob, rtol=1e-14, atol=1e-16,
                                                            max_num_steps=20))
    assert res.status == "simulation_failed"
    assert "CV_TOO_MUCH_WORK" in res.message and "Consult CVODES" not in res.message
    assert "step limit (max_num_steps=20)" in res.message
    assert "loosen the tolerances" in res.message
    [w] = [w for w in res.warnings if w.startswith("not converged")]
    assert "CV_TOO_MUCH_WORK" in w and "loosen the tolerances" in w
    assert "max_num_steps" in w and "try a start closer" not in w


def test_cvodes_flags_of_a_failed_adjoint_are_explained():
    """The text CasADi gives for CVODES's flags, as the package reports them; a
    failure of the backward integration (CV_NO_FWD) is explained as a failed forward
    integration (stiff model), with the tolerances and the reduced space as remedies."""
    from pyomo_odeest.discretization.continuous._cvodes import cvodes_failure
    text = ('the model cannot be simulated: CVODES failed: .../cvodes_interface.cpp:612: '
            'CVodeB returned "CV_NO_FWD". Consult CVODES documentation.')
    flag, meaning, remedy = cvodes_failure(text)
    assert flag == "CV_NO_FWD"
    assert "forward integration" in meaning and "stiff" in meaning
    assert "rtol" in remedy and "reduced_space" in remedy
    assert cvodes_failure("Restoration_Failed") is None


def _tiny_decay():
    """x' = -k x with x(0) = 2e-12: every state below CVODES's default atol 1e-12."""
    t = np.linspace(0.5, 5.0, 10)
    x = 2e-12 * np.exp(-t) * (1 + 0.05 * np.random.default_rng(0).normal(size=t.size))
    return po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 0.3, 0, 10)],
                                rhs=lambda x, u, t: [-u["k"] * x.x], initial={"x": 2e-12},
                                data=pd.DataFrame({"x": x}, index=t), sigma=1e-13)


def test_tiny_states_advise_atol_or_rescaling_not_another_start():
    """States of size 1e-12 (below the integrator's atol): the estimation does not
    converge, and the advice is the tolerance or the units, not the start or σ; the
    advice works (atol far below the states' size converges)."""
    pytest.importorskip("casadi")
    prob = _tiny_decay()
    res = po.estimate(prob, "continuous", engine="cvodes", options={"max_iter": 60})
    assert not res.success
    [w] = [w for w in res.warnings if w.startswith("not converged")]
    assert "the states are tiny (largest |x| = 2" in w and "atol=1e-12" in w
    assert "rescale the model" in w and "set atol far below" in w
    assert "try a start closer" not in w and "another approach" not in w
    # the advice works: the rescaled model (states of size 2) converges, and atol far
    # below the states' size reaches the same rate (the stationarity test, on sensitivities
    # of size 1e-12, does not certify that point: rescaling is the remedy that does)
    scaled = po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 0.3, 0, 10)],
                                  rhs=lambda x, u, t: [-u["k"] * x.x], initial={"x": 2.0},
                                  data=prob.data * 1e12, sigma=0.1)
    ok = po.estimate(scaled, "continuous", engine="cvodes")
    assert ok.success and ok.x[0] == pytest.approx(0.9945, abs=1e-3)
    again = po.estimate(prob, "continuous", engine="cvodes", atol=2e-20)
    assert again.x[0] == pytest.approx(ok.x[0], abs=1e-5)
