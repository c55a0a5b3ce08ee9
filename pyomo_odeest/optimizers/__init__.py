r"""Reduced-space optimizers driven by exact gradients [SEIRD, Section 4].

The problem is

.. math::

    \min_{x \in \mathbb{R}^n} f(x) \quad \text{s.t.} \quad \ell \le x \le u
    \qquad (\ell_i \in \mathbb{R}\cup\{-\infty\},\ u_i \in \mathbb{R}\cup\{+\infty\}),

where :math:`f` and :math:`g = \nabla f` are supplied as callables (in
the reduced-space approach :math:`g` comes from an adjoint or sensitivity
computation).  Both methods iterate

.. math::

    x_{k+1} = x(\alpha_k), \qquad x(\alpha) = P(x_k + \alpha d_k),
    \qquad P(z) = \min(\max(z, \ell), u),

with a descent direction :math:`d_k` and a step :math:`\alpha_k > 0`
from a one-dimensional search on :math:`\varphi(\alpha) = f(x(\alpha))`,
:math:`\varphi'(\alpha) = g(x(\alpha))^\top \dot x(\alpha)` [SEIRD,
eq. (26); :math:`\dot x_i(\alpha) = d_{k,i}` while component *i* moves
freely, 0 once it is clipped].

* :func:`minimize_cg` -- nonlinear conjugate gradients
  :math:`d_{k+1} = -g_{k+1} + \beta_{k+1} d_k` with the Fletcher--Reeves,
  Polak--Ribière(+), Hestenes--Stiefel or Dai--Yuan :math:`\beta`
  [SEIRD, Algorithm 1].
* :func:`minimize_bfgs` -- BFGS with the inverse-Hessian update
  [SEIRD, Algorithm 2].
* :func:`line_search_secant` -- the exact line search of [SEIRD],
  eqs. (25)--(26): secant iteration on :math:`\varphi'(\alpha) = 0`, with
  bracketing safeguards.
* :func:`line_search_wolfe` -- strong-Wolfe bracketing + zoom
  (Nocedal & Wright, *Numerical Optimization*, 2nd ed., Alg. 3.5/3.6).

Bounds are handled by projection (a simple projected / reduced-gradient
scheme, cf. Bertsekas 1982; Nocedal & Wright §16.7): a component is
*binding* at :math:`x` if it sits on a bound and :math:`-g_i` points out
of the box; binding components are frozen (direction component 0), the
search runs along the projected path :math:`P(x + \alpha d)`, CG restarts
and BFGS resets its inverse-Hessian approximation whenever the binding
set changes.  Convergence is declared when the projected gradient
satisfies :math:`\lVert P(x - g) - x\rVert_\infty \le` ``gtol``.

Re-exported by :mod:`pyomo_odeest` (the user API): none.

Building blocks, importable from here only (``__building_blocks__``): the reduced-space
optimizers are reached through ``estimate(..., optimizer=...)``; called directly they
take any objective and gradient: ``OptimizeHistory``, ``OptimizeResult``,
``minimize_cg``, ``minimize_bfgs``, ``line_search_secant``, ``line_search_wolfe``,
``CG_BETAS``, ``LINE_SEARCHES``, ``SolveClock``, ``WALL_TIME_STATUS``.
"""
from ._bfgs import minimize_bfgs
from ._cg import minimize_cg
from ._line_search import line_search_secant, line_search_wolfe
from ._projected import CG_BETAS, LINE_SEARCHES
from ._results import OptimizeHistory, OptimizeResult
from ._clock import WALL_TIME_STATUS, SolveClock

__all__ = ["OptimizeHistory", "OptimizeResult", "minimize_cg", "minimize_bfgs",
           "line_search_secant", "line_search_wolfe", "CG_BETAS", "LINE_SEARCHES", "SolveClock",
           "WALL_TIME_STATUS"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("OptimizeHistory", "OptimizeResult", "minimize_cg", "minimize_bfgs",
                       "line_search_secant", "line_search_wolfe", "CG_BETAS", "LINE_SEARCHES",
                       "SolveClock", "WALL_TIME_STATUS")
