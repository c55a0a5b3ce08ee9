r"""Adaptive integration of model (55) [GM-grad, §2.4], free or replaying a frozen
pattern, and the objective :math:`J_{h,k}(u)`."""
from __future__ import annotations

import numpy as np

from ._controller import AdaptiveError
from ._pattern import AdaptivePattern, AdaptiveRun

__all__ = ["Integration"]


class Integration:
    """Mixin of :class:`~pyomo_odeest.discretization.adaptive.AdaptiveModel`: integration and objective."""

    def run(self, u=None, pattern: AdaptivePattern | None = None) -> AdaptiveRun:
        r"""Adaptive integration at ``u`` (or replay of a frozen ``pattern``).

        Free mode follows (55): trial :math:`h_{i,1} = R(e_{i-1})h_{i-1}`
        (:math:`Q(x_0,u)` for :math:`i = 0`), after a rejection
        :math:`h_{i,j+1} = r(e_{i,j})h_{i,j}`, accept the first
        :math:`e_{i,j} \le \varepsilon`; trials overshooting the next
        measurement time :math:`\tau` (first trials also when they would
        leave less than ``stretch`` × the step) are clipped to
        :math:`\tau - t_i`.  With ``pattern`` the accept indices, clips and
        table levels are imposed instead of decided (the frozen model).

        Raises
        ------
        AdaptiveError
            No trial accepted within ``j_max`` (the "always successful"
            assumption fails), step underflow, or too many steps.
        """
        u = self._check_u(u)
        c = self.controller
        eps, n = c.eps, self.n
        x0 = self.initial_state(u)
        if not np.all(np.isfinite(x0)):
            raise AdaptiveError(f"initial state l(u) is not finite: {x0}", 0, self.t0)
        X, T = [x0], [self.t0]
        Ys, Hs, Es, Hl, El, YT, XC, Qs = [], [], [], [], [], [], [], []
        jl, cl, lev = [], [], []
        tgt = 0
        span = float(self.targets[-1] - self.t0)
        h_min = 1e-14 * span if c.h_min is None else float(c.h_min)
        i = 0
        while tgt < len(self.targets):
            if pattern is not None and i >= pattern.k:
                raise AdaptiveError(f"replayed pattern ends after {pattern.k} steps before T", i, T[-1])
            if i >= c.max_steps:
                raise AdaptiveError(f"more than max_steps={c.max_steps} steps", i, T[-1])
            tau = float(self.targets[tgt])
            Q = min(i + 1, self.qmax - 1)
            ti = T[i]
            xm, tm = self._hist(X, T, i, Q)
            fn = self._fn[Q]
            Htr, Etr, Ytr, Ctr, Ltr = [], [], [], [], []
            clip_at = 0
            jmax = c.j_max if pattern is None else pattern.j[i]
            accepted = None
            for jj in range(jmax):
                level = -1
                if jj == 0:
                    if i == 0:
                        h = self.Qfun(x0, u)[0]
                    else:
                        level = c.R.level(El[-1], eps) if pattern is None else pattern.levels[i][0]
                        h = self.ctl("R", El[-1], level)[0] * Hl[-1]
                else:
                    level = c.r.level(Etr[-1], eps) if pattern is None else pattern.levels[i][jj]
                    h = self.ctl("r", Etr[-1], level)[0] * Htr[-1]
                if pattern is None:
                    over = ti + h > tau
                    near = jj == 0 and tau - (ti + h) < c.stretch * h
                    clipped = bool(over or near)
                else:
                    clipped = pattern.clip[i] == jj + 1
                if clipped:
                    h = tau - ti
                    level = -1
                    clip_at = jj + 1
                if not (np.isfinite(h) and h > h_min):
                    raise AdaptiveError(f"step size underflow/invalid (h={h:.3g}, h_min="
                                        f"{h_min:.3g}) in step {i} at t={ti:.6g}", i, ti)
                args = (X[i], xm, u, h, ti, tm)
                with np.errstate(all="ignore"):
                    y = np.asarray(fn["Y"](*args), float).reshape(-1)
                    xc = np.asarray(fn["XC"](*args), float).reshape(-1)
                    e = float(fn["E"](*args))
                if not (np.all(np.isfinite(xc)) and np.isfinite(e)):
                    e = np.inf
                Htr.append(h)
                Etr.append(e)
                Ytr.append(y)
                Ctr.append(xc)
                Ltr.append(int(level))
                if pattern is None and e <= eps:
                    accepted = jj
                    break
            if pattern is not None:
                accepted = jmax - 1
            if accepted is None:
                raise AdaptiveError(
                    f"no trial of step {i} (t={ti:.6g}) accepted within j_max={c.j_max} trials "
                    f"(last estimate {Etr[-1]:.3g} > eps={eps:.3g})", i, ti)
            if not np.all(np.isfinite(Ctr[accepted])):
                raise AdaptiveError(f"non-finite state in step {i} at t={ti:.6g}", i, ti)
            h = Htr[accepted]
            land = clip_at == accepted + 1
            T.append(tau if land else ti + h)
            if land:
                tgt += 1
            X.append(Ctr[accepted])
            Ys.append(Ytr[accepted])
            Hl.append(h)
            El.append(Etr[accepted])
            Hs.append(np.array(Htr))
            Es.append(np.array(Etr))
            YT.append(np.array(Ytr))
            XC.append(np.array(Ctr))
            Qs.append(Q)
            jl.append(accepted + 1)
            cl.append(clip_at)
            lev.append(tuple(Ltr))
            i += 1
        if pattern is not None and i != pattern.k:
            raise AdaptiveError(f"replayed pattern has {pattern.k} steps; T reached after {i}", i, T[-1])
        t = np.array(T)
        pos = {v: ix for ix, v in enumerate(t)}
        try:
            J = np.array([pos[float(tau)] for tau in self.problem.meas_times], dtype=int)
        except KeyError as err:       # pragma: no cover - landing is exact by construction
            raise AdaptiveError(f"measurement time {err} is not a grid point") from None
        pat = AdaptivePattern(j=tuple(jl), clip=tuple(cl), levels=tuple(lev))
        return AdaptiveRun(u=u, t=t, x=np.array(X), y=np.array(Ys).reshape(-1, n), h=np.array(Hl),
                           e=np.array(El), H=Hs, eta=Es, yt=YT, xc=XC, Q=np.array(Qs, dtype=int),
                           pattern=pat, J=J)

    def objective(self, u=None, pattern=None, run=None) -> float:
        r""":math:`J_{h,k}(u)` (adaptive integration; frozen ``pattern`` if given)."""
        run = self.run(u, pattern) if run is None else run
        return self._phi_parts(run)[0]
