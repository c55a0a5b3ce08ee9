r"""The front door: every argument checked before anything is built or solved.

Two entry points, one per moment:

* while an :class:`~pyomo_odeest.EstimationProblem` is constructed,
  :func:`as_data_frame`, :func:`as_spec` and :func:`check_weights` turn the
  user's data, standard deviations and weights into numbers or refuse them
  with the column, row or observable named;
* before an estimator builds its model,
  :func:`pyomo_odeest.discretization._size_guard.validate_estimator` checks the
  estimator's arguments (scheme, order, grid, start values, solver options,
  method names) with the checks defined here, and refuses a discretization
  that cannot fit in the machine's memory (it needs the grids and schemes of
  the discretization layer, so it lives there).

Nothing here repairs an input silently: every refusal is a
:class:`ProblemError` (a :class:`ValueError`) or a :class:`TypeError` whose
message names the argument and says what would be valid.  Checking before
the solve matters for Ipopt: an exception raised inside one of Ipopt's
callbacks becomes an evaluation error, not an error the caller sees.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Mapping

import datetime

import numpy as np
import pandas as pd

__all__ = ["ProblemError", "ProblemTooLargeError", "as_data_frame", "as_spec", "check_weights",
           "positive_int", "positive_float", "check_options", "DEFAULT_MAX_ITER"]


class ProblemError(ValueError):
    """The problem statement or an estimator argument is invalid; the message names the culprit."""


class ProblemTooLargeError(ProblemError):
    """The discretized problem would not fit in the available memory."""


#: Ipopt's iteration limit unless the options set ``max_iter`` (Ipopt's own
#: default, 3000, let a drifting exact-Hessian solve run for minutes).
DEFAULT_MAX_ITER = 500

# ---------------------------------------------------------------------------
# data, sigma, weights (problem construction)
# ---------------------------------------------------------------------------
def _numeric_column(col, where):
    """``col`` as floats; a cell that is not a number is named by row and column."""
    if (pd.api.types.is_datetime64_any_dtype(col) or pd.api.types.is_timedelta64_dtype(col)
            or isinstance(col.dtype, pd.PeriodDtype)
            or (col.dtype == object and len(col) and isinstance(
                col.iloc[0], (datetime.date, datetime.time, datetime.timedelta, pd.Period)))):
        raise ProblemError(f"{where} holds dates or durations ({col.dtype}, e.g. "
                           f"{col.iloc[0]!r}); times and values must be numbers: convert them, "
                           f"e.g. (t - t[0]) / pd.Timedelta(days=1) for days since the first")
    num = pd.to_numeric(col, errors="coerce")
    bad = num.isna() & col.notna() & (col.astype(str).str.strip() != "")
    if bad.any():
        row = bad.to_numpy().nonzero()[0][0]
        raise ProblemError(f"{where}: the cell in row {row} (index {col.index[row]!r}) is "
                           f"{col.iloc[row]!r}, not a number; use a number, or leave the cell "
                           f"empty (NaN) for a missing measurement")
    return num.astype(float)


def as_data_frame(data):
    """The user's measurements as a frame of numbers (wide or long format kept)."""
    if not isinstance(data, pd.DataFrame):
        raise ProblemError(f"data must be a pandas DataFrame (wide: index = time, one column per "
                           f"observed quantity; long: columns time, name, value), got "
                           f"{type(data).__name__}")
    if data.shape[0] == 0 or data.shape[1] == 0:
        raise ProblemError(f"data are empty (shape {data.shape}): at least one measurement "
                           f"is required (or pass data=None with T to state dynamics only)")
    if data.columns.duplicated().any():
        dup = sorted({str(c) for c in data.columns[data.columns.duplicated()]})
        raise ProblemError(f"data has duplicate columns {dup}; each observed quantity once")
    cols = {str(c).lower(): c for c in data.columns}
    long = "time" in cols and "value" in cols and ("name" in cols or "observable" in cols)
    out = data.copy()
    if long:
        for key in ("time", "value", "sigma"):
            if key in cols:
                out[cols[key]] = _numeric_column(data[cols[key]], f"data column '{cols[key]}'")
        return out
    if not pd.api.types.is_numeric_dtype(data.index.dtype):
        idx = pd.Series(data.index, index=range(len(data.index)))
        out.index = pd.Index(_numeric_column(idx, "data index (time)").to_numpy())
    for c in data.columns:
        # by position: the index may have been converted above
        out[c] = _numeric_column(data[c], f"data column '{c}'").to_numpy()
    return out


def as_spec(spec, index, names, what):
    """``sigma`` or ``weights`` as a scalar, mapping or frame.

    Accepts a number, a mapping observable -> number, a frame like the data,
    a sequence with one value per observable, or an array of the data's
    shape (rows = measurement times, columns = observables).
    """
    if isinstance(spec, pd.Series):
        spec = spec.to_dict()
    if spec is None or isinstance(spec, (Mapping, pd.DataFrame)):
        for k, v in (spec.items() if isinstance(spec, Mapping) else ()):
            _number(v, f"{what}[{k!r}]")
        return spec
    if isinstance(spec, (str, bytes)):
        raise ProblemError(f"{what} must be a number, one number per observable {names}, a mapping "
                           f"observable -> number or an array of the data's shape; got {spec!r}")
    try:
        arr = np.asarray(spec, dtype=float)
    except (TypeError, ValueError):
        raise ProblemError(f"{what} must be numeric (a number, one per observable {names}, or an "
                           f"array of the data's shape {(len(index), len(names))}); got {spec!r}") from None
    if arr.ndim == 0:
        return float(arr)
    if arr.ndim == 1 and arr.size == len(names):
        return dict(zip(names, arr.tolist()))
    if arr.shape == (len(index), len(names)):
        return pd.DataFrame(arr, index=index, columns=names)
    raise ProblemError(f"{what} has shape {arr.shape}; give one value per observable "
                       f"({len(names)}: {names}) or an array of the data's shape "
                       f"{(len(index), len(names))} (rows = times, columns = observables)")


def _number(v, what):
    if isinstance(v, bool) or not isinstance(v, (Real, np.number)):
        raise ProblemError(f"{what} must be a number, got {v!r}")
    return float(v)


def check_weights(w, mask):
    """Refuse weights that make the objective identically zero."""
    wm = np.asarray(w)[mask]
    if wm.size and not np.any(wm > 0):
        raise ProblemError("weights are zero for every measurement: the objective would be 0 "
                           "for any parameters; give positive weights (or sigma)")


# ---------------------------------------------------------------------------
# estimator arguments
# ---------------------------------------------------------------------------
def positive_int(v, what, lo=1, hi=None):
    if isinstance(v, bool) or not isinstance(v, Integral):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ProblemError(f"{what} must be an integer >= {lo}, got {v!r}")
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ProblemError(f"{what} must be an integer {rng}, got {v}")
    return v


def positive_float(v, what):
    x = _number(v, what) if v is not None else None
    if x is None or not math.isfinite(x) or x <= 0:
        raise ProblemError(f"{what} must be a positive finite number, got {v!r}")
    return x


def check_options(options):
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ProblemError(f"options must be a dict of solver options, got {type(options).__name__}")
    for k, v in options.items():
        if not isinstance(k, str):
            raise ProblemError(f"option names must be strings, got {k!r}")
        if k in ("max_iter", "maxiter"):
            positive_int(v, f"options['{k}']", lo=0)
        elif k in ("tol", "acceptable_tol", "gtol", "ftol", "xtol", "constr_viol_tol"):
            positive_float(v, f"options['{k}']")
