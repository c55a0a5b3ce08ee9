"""Data, standard deviations, weights and inputs of a problem in the package's own form:
wide frames over the measurement times, per-datum weights, checked inputs and their
switching times."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._components import _check_names
from ._validation import ProblemError, as_spec

__all__ = []


def _check_inputs(inputs, states, pnames):
    """``{name: Input}`` checked against the states and parameters."""
    from ._inputs import Input
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        raise ProblemError("inputs must map input names to Input objects (PiecewiseConstant, "
                           "PiecewiseLinear, Spline)")
    names = _check_names(list(inputs), "input")
    clash = set(names) & (set(states) | set(pnames))
    if clash:
        raise ProblemError(f"input names {sorted(clash)} are also state or parameter names")
    for k, v in inputs.items():
        if not isinstance(v, Input):
            raise ProblemError(f"input '{k}' must be a PiecewiseConstant, PiecewiseLinear or "
                               f"Spline, got {type(v).__name__}")
        bad = [p for p in v.parameter_names() if p not in pnames]
        if bad:
            raise ProblemError(f"input '{k}': values {bad} name no parameter")
    return dict(inputs)


def _switch_times(inputs, t0, T):
    """Breakpoints of the inputs inside (t0, T), sorted; a spline must cover [t0, T]."""
    from ._inputs import Spline
    pts = [np.zeros(0)]
    for k, v in inputs.items():
        if isinstance(v, Spline) and (v.times[0] > t0 or v.times[-1] < T):
            raise ProblemError(f"input '{k}': the spline covers [{v.times[0]}, {v.times[-1]}], "
                               f"not the horizon [{t0}, {T}]")
        pts.append(np.asarray(v.breakpoints, dtype=float))
    sw = np.unique(np.concatenate(pts))
    return sw[(sw > t0) & (sw < T)]


def _to_wide(data):
    """Wide frame (index = time) and, for long input, a wide frame of sigmas."""
    cols = [str(c).lower() for c in data.columns]
    if "time" in cols and "value" in cols and ("name" in cols or "observable" in cols):
        d = data.rename(columns={c: str(c).lower() for c in data.columns})
        key = "name" if "name" in d.columns else "observable"
        v = d["value"].to_numpy(dtype=float)
        if np.any(~np.isfinite(v)):
            i = int(np.argmax(~np.isfinite(v)))
            raise ProblemError(f"long-format measurement in row {i} ({d[key].iloc[i]} at "
                               f"t={d['time'].iloc[i]}) is {v[i]}: a value is required")
        tt = d["time"].to_numpy(dtype=float)
        if np.any(~np.isfinite(tt)):
            raise ProblemError("long-format data contain a non-finite time")
        dup = d.duplicated(subset=["time", key])
        if dup.any():
            i = int(np.argmax(dup.to_numpy()))
            raise ProblemError(f"duplicate measurement of {d[key].iloc[i]} at t={d['time'].iloc[i]}")
        wide = d.pivot(index="time", columns=key, values="value").sort_index()
        sig = None
        if "sigma" in d.columns:
            sig = d.pivot(index="time", columns=key, values="sigma").sort_index()
        wide.columns = [str(c) for c in wide.columns]
        return wide, sig
    idx = data.index.to_numpy()
    try:
        times = idx.astype(float)
    except (TypeError, ValueError):
        raise ProblemError("wide data need a numeric time index "
                           "(or use long format with columns time, name, value)") from None
    if np.any(~np.isfinite(times)):
        raise ProblemError("data index contains a non-finite time")
    if len(times) > 1 and np.any(np.diff(times) == 0) or len(np.unique(times)) != len(times):
        raise ProblemError("data times contain duplicates; each time must appear once")
    if np.any(np.diff(times) < 0):
        raise ProblemError("data times are not sorted increasingly")
    wide = data.copy()
    wide.index = pd.Index(times, name="time")
    wide.columns = [str(c) for c in wide.columns]
    return wide, None


def _expand_spec(spec, wide, names, what):
    """A float, mapping or frame → array like the wide data."""
    shape = (len(wide.index), len(names))
    spec = as_spec(spec, wide.index, names, what)
    if isinstance(spec, pd.DataFrame):
        s = spec.copy()
        s.columns = [str(c) for c in s.columns]
        s.index = s.index.astype(float)
        bad = [c for c in s.columns if c not in names]
        if bad:
            raise ProblemError(f"{what} columns {bad} name no observed quantity")
        return s.reindex(index=wide.index, columns=names).to_numpy(dtype=float)
    if isinstance(spec, Mapping):
        bad = [c for c in spec if c not in names]
        if bad:
            raise ProblemError(f"{what} names {bad}, which are not observed quantities")
        return np.array([[float(spec.get(c, np.nan)) for c in names]] * shape[0]).reshape(shape)
    return np.full(shape, float(spec))


def _weights(sigma, weights, sig_long, wide, names, mask):
    if sigma is not None and weights is not None:
        raise ProblemError("give either sigma or weights, not both")
    if sigma is None and sig_long is not None:
        sigma = sig_long.reindex(index=wide.index, columns=names)
    if sigma is not None:
        s = _expand_spec(sigma, wide, names, "sigma")
        sm = s[mask]
        if np.any(np.isnan(sm)):
            raise ProblemError("sigma is missing for some measurements")
        if np.any(~(sm > 0)) or np.any(np.isinf(sm)):
            raise ProblemError(f"standard deviations must be positive and finite; got "
                               f"{sm[~((sm > 0) & np.isfinite(sm))][:3]}")
        w = np.where(mask, 1.0 / np.where(mask, s, 1.0) ** 2, 0.0)
        return w
    if weights is not None:
        w = _expand_spec(weights, wide, names, "weights")
        wm = w[mask]
        if np.any(np.isnan(wm)) or np.any(wm < 0) or np.any(np.isinf(wm)):
            raise ProblemError("weights must be finite and non-negative for every measurement")
        return np.where(mask, w, 0.0)
    return mask.astype(float)
