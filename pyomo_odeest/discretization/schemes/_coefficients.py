"""Coefficients of the multistep formulas for any step history, from order conditions
(exactness on polynomials): Adams–Bashforth, Adams–Moulton [GM-grad, eqs. (4)–(5)] and
Enright [GM-grad, eq. (6)]; on uniform grids they reduce to the classical tables."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.polynomial import legendre as _leg


# ---------------------------------------------------------------------------
# Coefficient derivations
# ---------------------------------------------------------------------------
def _as_times(t_hist, what="t_hist") -> np.ndarray:
    th = np.atleast_1d(np.asarray(t_hist, dtype=float))
    if th.ndim != 1 or th.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of times")
    if not np.all(np.isfinite(th)):
        raise ValueError(f"{what} contains non-finite values: {th}")
    if th.size > 1 and not np.all(np.diff(th) < 0):
        raise ValueError(
            f"{what} must be strictly decreasing (t_i, t_(i-1), ..., t_(i-Q+1)), got {th}"
        )
    return th


@lru_cache(maxsize=None)
def _gauss_legendre_01(npts: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [0, 1]."""
    xg, wg = _leg.leggauss(npts)
    nodes, weights = 0.5 * (xg + 1.0), 0.5 * wg
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def _chebyshev_table(u: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """T_m(u) and T_m'(u) for m = 0..n-1 (three-term recurrence); shape (n, *u.shape)."""
    t = np.empty((n,) + u.shape)
    d = np.empty((n,) + u.shape)
    t[0], d[0] = 1.0, 0.0
    if n > 1:
        t[1], d[1] = u, 1.0
    for m in range(1, n - 1):
        t[m + 1] = 2.0 * u * t[m] - t[m - 1]
        d[m + 1] = 2.0 * t[m] + 2.0 * u * d[m] - d[m - 1]
    return t, d


def _quadrature_weights(value_nodes, deriv_nodes=None) -> np.ndarray:
    r"""Weights of generalized quadratures on :math:`[0, 1]` (batched).

    For each row ``b`` finds :math:`w, v` with

    .. math::

        \int_0^1 P(s)\,ds = \sum_j w_j P(s_{bj}) + \sum_l v_l P'(r_{bl})

    for every polynomial :math:`P` of degree :math:`< N`, :math:`N` the total
    number of nodes of a row.  The moment conditions are written in the
    Chebyshev basis on the interval spanned by the row's nodes and
    :math:`[0, 1]` (well conditioned for the small :math:`N` used here); the
    moments are exact Gauss–Legendre sums.

    Parameters
    ----------
    value_nodes : array_like, shape (B, nv) or (nv,)
    deriv_nodes : array_like, shape (B, nd) or (nd,), optional

    Returns
    -------
    numpy.ndarray, shape (B, nv + nd) (or (nv + nd,) for 1-D input)
    """
    sv = np.asarray(value_nodes, dtype=float)
    single = sv.ndim == 1
    sv = np.atleast_2d(sv)
    bsz = sv.shape[0]
    sd = np.zeros((bsz, 0)) if deriv_nodes is None else np.asarray(deriv_nodes, dtype=float).reshape(bsz, -1)
    nv, n = sv.shape[1], sv.shape[1] + sd.shape[1]
    allpts = np.concatenate([sv, sd, np.zeros((bsz, 1)), np.ones((bsz, 1))], axis=1)
    lo = allpts.min(axis=1, keepdims=True)
    hi = allpts.max(axis=1, keepdims=True)
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    sg, wg = _gauss_legendre_01(n // 2 + 1)
    u = (np.concatenate([sv, sd, np.broadcast_to(sg, (bsz, sg.size))], axis=1) - mid) / half
    tab, der = _chebyshev_table(u, n)  # (n, B, npts)
    a = np.concatenate([tab[:, :, :nv], der[:, :, nv:n] / half], axis=2)  # (m, B, col)
    a = np.transpose(a, (1, 0, 2))  # (B, m, col)
    rhs = tab[:, :, n:] @ wg  # (n, B)
    w = np.linalg.solve(a, rhs.T[:, :, None])[:, :, 0]
    return w[0] if single else w


def _ab_weights(s: np.ndarray) -> np.ndarray:
    """Adams–Bashforth weights for scaled past nodes s (B, Q) -> (B, Q)."""
    return _quadrature_weights(s)


def _am_weights(s: np.ndarray) -> np.ndarray:
    """Adams–Moulton weights (K_0 for s = 1, then K_1..K_Q) -> (B, Q+1)."""
    return _quadrature_weights(np.concatenate([np.ones((s.shape[0], 1)), s], axis=1))


def _enright_weights(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enright weights: rho (B, Q+1) (rho_0 first) and sigma (B,)."""
    w = _quadrature_weights(np.concatenate([np.ones((s.shape[0], 1)), s], axis=1), np.ones((s.shape[0], 1)))
    return w[:, :-1], w[:, -1]


def _solve_public(weights, s):
    try:
        return weights(s)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"order conditions are singular for the scaled history {s[0]}: ill-conditioned step sizes") from exc


def adams_bashforth_coefficients(t_hist, h) -> np.ndarray:
    r"""Variable-step Adams–Bashforth coefficients :math:`\Pi_1, \dots, \Pi_Q`.

    The predictor of [GM-grad], eq. (5),

    .. math::

        y_{i+1} = x_i + h_i \sum_{j=1}^{Q} \Pi_j f(x_{i-j+1}, t_{i-j+1}),

    integrates over :math:`[t_i, t_i + h_i]` the polynomial interpolating
    :math:`f` at the :math:`Q` past times.  With :math:`s = (t - t_i)/h_i`
    the weights solve :math:`\sum_j \Pi_j s_j^m = 1/(m+1)`,
    :math:`m = 0, \dots, Q-1`: the formula is exact when :math:`x` is a
    polynomial of degree :math:`\le Q` (local error :math:`O(h^{Q+1})`,
    order :math:`Q`).

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots, t_{i-Q+1})`, strictly decreasing.
    h : float
        Step :math:`h_i > 0`.

    Returns
    -------
    numpy.ndarray
        :math:`(\Pi_1, \dots, \Pi_Q)`; uniform steps give the classical
        tables, e.g. AB2 = (3/2, -1/2).
    """
    th = _as_times(t_hist)
    h = float(h)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"step h must be positive and finite, got {h}")
    return _solve_public(_ab_weights, ((th - th[0]) / h)[None, :])[0]


def adams_moulton_coefficients(t_hist, t_new, q=None) -> np.ndarray:
    r"""Variable-step Adams–Moulton coefficients :math:`K_0, K_1, \dots, K_Q`.

    The corrector of [GM-grad], eq. (4),

    .. math::

        x_{i+1} = x_i + h_i \Big[K_0 f(\cdot, t_{i+1})
                  + \sum_{j=1}^{Q} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    integrates the polynomial interpolating :math:`f` at :math:`t_{i+1}` and
    the :math:`Q` past times (:math:`Q+1` points): exact for :math:`x` of
    degree :math:`\le Q+1` (order :math:`Q+1`, written :math:`K^{Q+1}` in the
    seed).

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots)`, strictly decreasing; its first entry
        fixes :math:`h_i = t_{\mathrm{new}} - t_i`.
    t_new : float
        :math:`t_{i+1} > t_i`.
    q : int, optional
        Number of past points :math:`Q` to use (default ``len(t_hist)``);
        ``q=0`` gives the backward Euler rule :math:`K_0 = 1`.

    Returns
    -------
    numpy.ndarray
        :math:`(K_0, K_1, \dots, K_Q)`; uniform steps give the classical
        tables, e.g. AM2 = (1/2, 1/2), AM3 = (5/12, 8/12, -1/12).
    """
    th = _as_times(t_hist)
    h = float(t_new) - th[0]
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"t_new must be finite and > t_hist[0]; got t_new={t_new}, t_i={th[0]}")
    q = th.size if q is None else int(q)
    if not 0 <= q <= th.size:
        raise ValueError(f"q must be in [0, len(t_hist)={th.size}], got {q}")
    return _solve_public(_am_weights, ((th[:q] - th[0]) / h)[None, :])[0]


def enright_coefficients(t_hist, t_new) -> tuple[np.ndarray, float]:
    r"""Variable-step Enright second-derivative coefficients.

    [GM-grad], eq. (6), with the :math:`h^2` coefficient written as its own
    unknown :math:`\sigma` ([GM-grad] reuses the symbol :math:`\rho_0`):

    .. math::

        x_{i+1} = x_i + h_i \sum_{j=1}^{Q} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(x_{i+1}),
        \qquad \dot f = D_x f\, f + \partial_t f.

    The :math:`Q + 2` unknowns are fixed by exactness for :math:`x` a
    polynomial of degree :math:`\le Q + 2` (in :math:`s = (t-t_i)/h_i`:
    :math:`1 = \sum_j \rho_j m s_j^{m-1} + \rho_0 m + \sigma m (m-1)`,
    :math:`m = 1, \dots, Q+2`), i.e. the :math:`\rho^{Q+2}` of [GM-grad].  Local
    error :math:`O(h^{Q+3})`, order :math:`Q + 2`.  For :math:`Q = 1`,
    :math:`\rho_0 = 2/3`, :math:`\rho_1 = 1/3`, :math:`\sigma = -1/6` on any
    step.

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots, t_{i-Q+1})`, strictly decreasing.
    t_new : float
        :math:`t_{i+1} > t_i`.

    Returns
    -------
    rho : numpy.ndarray
        :math:`(\rho_0, \rho_1, \dots, \rho_Q)`.
    sigma : float
        Coefficient of :math:`h_i^2 \dot f(x_{i+1})`.
    """
    th = _as_times(t_hist)
    h = float(t_new) - th[0]
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"t_new must be finite and > t_hist[0]; got t_new={t_new}, t_i={th[0]}")
    rho, sigma = _solve_public(_enright_weights, ((th - th[0]) / h)[None, :])
    return rho[0], float(sigma[0])
