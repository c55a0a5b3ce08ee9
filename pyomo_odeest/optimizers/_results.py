"""What the optimizers return: the iteration history and the result."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd


# ---------------------------------------------------------------------------
# result containers
# ---------------------------------------------------------------------------
@dataclass
class OptimizeHistory:
    """Iteration record, one row per iterate.

    Row 0 is the (projected) starting point with ``step = nan``; row *k*
    (k ≥ 1) is the iterate after the *k*-th line search.

    Attributes
    ----------
    it : list of int
        Iteration number *k*.
    f : list of float
        :math:`f(x_k)`.
    gnorm : list of float
        Projected-gradient norm :math:`\\lVert P(x_k - g_k) - x_k\\rVert_\\infty`
        (equals :math:`\\lVert g_k\\rVert_\\infty` without bounds).
    x : list of numpy.ndarray
        Copies of :math:`x_k`.
    step : list of float
        Accepted step :math:`\\alpha_{k-1}` that produced :math:`x_k`.
    nfev, ngev : list of int
        Cumulative numbers of ``fun`` / ``grad`` calls after iteration *k*.
    """

    it: list = field(default_factory=list)
    f: list = field(default_factory=list)
    gnorm: list = field(default_factory=list)
    x: list = field(default_factory=list)
    step: list = field(default_factory=list)
    nfev: list = field(default_factory=list)
    ngev: list = field(default_factory=list)

    def append(self, it, f, gnorm, x, step, nfev, ngev) -> None:
        """Record one iterate (``x`` is copied)."""
        self.it.append(int(it))
        self.f.append(float(f))
        self.gnorm.append(float(gnorm))
        self.x.append(np.array(x, dtype=float, copy=True))
        self.step.append(float(step))
        self.nfev.append(int(nfev))
        self.ngev.append(int(ngev))

    def __len__(self) -> int:
        return len(self.it)

    def to_frame(self) -> pd.DataFrame:
        """Return the history as a DataFrame indexed by ``it``.

        Columns ``f, gnorm, step, nfev, ngev`` and ``x0 .. x{n-1}``.
        """
        df = pd.DataFrame({"f": self.f, "gnorm": self.gnorm, "step": self.step,
                           "nfev": self.nfev, "ngev": self.ngev},
                          index=pd.Index(self.it, name="it"))
        if self.x:
            X = np.vstack(self.x)
            for j in range(X.shape[1]):
                df[f"x{j}"] = X[:, j]
        return df


@dataclass
class OptimizeResult:
    """Outcome of :func:`minimize_cg` / :func:`minimize_bfgs`.

    Attributes
    ----------
    x : numpy.ndarray
        Final iterate.
    fun : float
        :math:`f(x)`.
    grad : numpy.ndarray
        :math:`g(x)` (the full gradient, not projected).
    nit : int
        Number of iterations (accepted line searches).
    nfev, ngev : int
        Number of calls of ``fun`` and ``grad``.
    success : bool
        True if a stopping test (``gtol`` or ``ftol``) was met.
    message : str
        Why the iteration stopped.
    history : OptimizeHistory
    method : str
        e.g. ``'CG-PR/wolfe'`` or ``'BFGS/secant'``.
    hess_inv : numpy.ndarray or None
        BFGS only: the final inverse-Hessian approximation :math:`H`
        (acting on the free components when bounds are binding); ``None``
        for CG.
    """

    x: np.ndarray
    fun: float
    grad: np.ndarray
    nit: int
    nfev: int
    ngev: int
    success: bool
    message: str
    history: OptimizeHistory
    method: str
    hess_inv: Optional[np.ndarray] = None
