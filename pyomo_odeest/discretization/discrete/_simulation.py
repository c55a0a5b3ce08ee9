"""Forward simulation of the discrete problem: G(w, u) = 0 by block forward substitution.

Explicit blocks are evaluated, implicit blocks (own point in an f or ḟ term)
solved by Newton's method; in numpy, or compiled (:mod:`._compiled`) when the
model's engine is numba.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Simulation", "SimulationError", "Trajectory"]


class SimulationError(RuntimeError):
    """A step of the discrete simulation failed (non-finite values, Newton divergence)."""

    def __init__(self, message, step=None, time=None):
        super().__init__(message)
        self.step = step
        self.time = time


@dataclass
class Trajectory:
    """Solution w of G(w, u) = 0 at parameters u."""

    u: np.ndarray
    W: np.ndarray            # (nblocks, n)
    X: np.ndarray            # (k+1, n) view of the x blocks
    newton_iterations: int = 0


class Simulation:
    """Mixin of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`: the forward solve."""

    def simulate(self, u, newton_tol=1e-13, max_newton=30) -> Trajectory:
        """Solve G(w, u) = 0 block by block; raise :class:`SimulationError` on failure."""
        u = self._check_u(u)
        self.nsim += 1
        n = self.n
        W = np.full((self.nblocks, n), np.nan)
        W[0] = self.l.point(np.zeros(0), u, self.t[0])
        if not np.all(np.isfinite(W[0])):
            raise SimulationError(f"initial state l(u) is not finite: {W[0]}", 0, self.t[0])
        kernel = self._compiled()
        if kernel is not None:
            return self._simulate_compiled(kernel, W, u, newton_tol, max_newton)
        kinds = [(fn, {}) + kind for fn, kind in
                 zip((self.f, getattr(self, "fd", None)), self._term_kinds())]
        newton_total = 0
        ul = u.tolist()      # the lambdified code runs 2-3x faster on Python floats
        with np.errstate(all="ignore"):
            for b in range(1, self.nblocks):
                rhs = W[self.base[b]].copy()
                own = [0, 0]                  # implicit coefficients of f and ḟ
                for kind, (fn, cache, by_eq, pts, cs) in enumerate(kinds):
                    for e in by_eq[b]:
                        p = pts[e]
                        if p == b:
                            own[kind] += cs[e]
                            continue
                        if p not in cache:    # f (ḟ) once per point
                            cache[p] = fn.point(W[p].tolist(), ul, float(self.blk_time[p]))
                        rhs += cs[e] * cache[p]
                if not self.implicit[b]:
                    W[b] = rhs
                else:
                    W[b], it = self._newton(b, rhs, own[0], own[1], u, newton_tol, max_newton)
                    newton_total += it
                if not np.all(np.isfinite(W[b])):
                    self._fail_nonfinite(b, u)
        return Trajectory(u=u, W=W, X=W[self.xblk], newton_iterations=newton_total)

    def _simulate_compiled(self, kernel, W, u, tol, max_it):
        """The same block forward substitution and Newton iteration, compiled."""
        a = self.compiled_arrays()
        status, b, newton_total = kernel.simulate(
            W, np.array(u, dtype=float), a["blk_time"], a["base"], a["implicit"], a["f_ptr"], a["f_pt"], a["f_c"],
            a["d_ptr"], a["d_pt"], a["d_c"], a["fx_rows"], a["fx_cols"], a["fdx_rows"],
            a["fdx_cols"], float(tol), int(max_it))
        if status == 1:
            self._fail_nonfinite(b, u)
        if status == 2:
            self._fail_newton(b, u)
        return Trajectory(u=u, W=W, X=W[self.xblk], newton_iterations=int(newton_total))

    def _fail_nonfinite(self, b, u):
        i = self.blk_step[b]
        raise SimulationError(
            f"non-finite state in step {i} (stage {self.blk_stage[b]}, "
            f"t = {self.blk_time[b]:.6g}) at u = {u}", i, self.blk_time[b])

    def _fail_newton(self, b, u):
        i, tb = self.blk_step[b], self.blk_time[b]
        raise SimulationError(f"Newton did not converge in step {i} (stage {self.blk_stage[b]}, "
                              f"t = {tb:.6g}) at u = {u}", i, tb)

    def _newton(self, b, rhs, c, d, u, tol, max_it):
        """Solve v = rhs + c f(v) + d ḟ(v) by Newton's method."""
        tb = self.blk_time[b]
        v = self._newton_start(b, rhs)
        n = self.n
        for it in range(1, max_it + 1):
            r = v - rhs - c * self.f.point(v, u, tb)
            Jm = np.eye(n) - c * self.fx.dense(self.fx.point(v, u, tb))[0]
            if d:
                r -= d * self.fd.point(v, u, tb)
                Jm -= d * self.fdx.dense(self.fdx.point(v, u, tb))[0]
            if not np.all(np.isfinite(r)) or not np.all(np.isfinite(Jm)):
                break
            try:
                dv = np.linalg.solve(Jm, -r)
            except np.linalg.LinAlgError:
                break
            v = v + dv
            if np.max(np.abs(dv) / (1 + np.abs(v))) <= tol:     # each state on its own scale
                return v, it
        self._fail_newton(b, u)

    def _newton_start(self, b, rhs):
        return rhs.copy()
