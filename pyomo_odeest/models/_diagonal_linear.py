r"""Diagonal linear test model of [MHV] (§6.1, eqs. (24)–(29)).

.. math::

    \dot x = A x,\quad A = \operatorname{diag}(\phi_1, \dots, \phi_p),\quad x(0) = \mathbf 1,
    \qquad x_i(t) = e^{\phi_i t}\quad\text{(eq. (25))},

all p states observed at ``n_obs`` times spread regularly in [0, T] ([MHV]:
T = 100, 11 times).  True parameters :math:`\phi_i \sim U[-1.1, -0.1]`
(eq. (26)); data perturbed as in eq. (27),
:math:`\bar y_{ji} \sim U[y_{ji}, y_{ji} + 0.1\max(y)]` with :math:`\max(y)`
the largest value of all data (= 1, at t = 0).  Loss: the Gaussian negative
log-likelihood with :math:`\Sigma = I` [MHV, §6],
:math:`\varphi_j = \tfrac12\|x(t_j) - \bar y_j\|^2` plus the constant
:math:`\tfrac{Np}{2}\log 2\pi`.

Since :math:`\partial x_i(t)/\partial\phi_k = \delta_{ik}\,t\,x_i(t)`, the gradient
and Hessian have closed forms (for :math:`\Sigma = I`, eqs. (28)–(29)):
:func:`diagonal_linear_exact_gradient` and :func:`diagonal_linear_exact_hessian`
evaluate them for any loss, weights and missing values of the problem.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem._declaration import EstimationProblem, GaussianNLL, Parameter

__all__ = ["diagonal_linear_problem", "diagonal_linear_exact_gradient",
           "diagonal_linear_exact_hessian", "diagonal_linear_solution"]


def diagonal_linear_solution(phi, times, x0=1.0):
    """Exact states ``x_i(t) = x0 e^{φ_i t}`` (eq. (25)), shape (len(times), p)."""
    phi = np.asarray(phi, dtype=float)
    return x0 * np.exp(np.outer(np.asarray(times, dtype=float), phi))


def diagonal_linear_problem(p, n_obs=11, seed=0, T=100.0, perturb=True, start=-0.6,
                            bounds=(-3.0, 1.0), loss=None):
    r"""The [MHV] diagonal linear problem with p parameters.

    Parameters
    ----------
    p : int
        Dimension (states = parameters = p).
    n_obs : int
        Number of measurement times, ``np.linspace(0, T, n_obs)``.
    seed : int
        Seed of the draws (26) and (27).
    T : float
        Final time (seed: 100).
    perturb : bool
        Apply the perturbation (27); ``False`` gives exact data.
    start : float
        Start value of every φ_i.
    bounds : (lb, ub)
        Bounds of every φ_i.
    loss : LeastSquares or GaussianNLL, optional
        Default ``GaussianNLL(np.eye(p))`` [MHV, §6: Σ = I].

    Returns
    -------
    EstimationProblem with states ``x1..xp``, parameters ``phi1..phip``; the
    true values are in ``problem.true_values`` (array).
    """
    p = int(p)
    if p < 1 or n_obs < 1:
        raise ValueError("p and n_obs must be positive")
    rng = np.random.default_rng(seed)
    phi = rng.uniform(-1.1, -0.1, p)
    times = np.linspace(0.0, float(T), int(n_obs))
    y = diagonal_linear_solution(phi, times)
    if perturb:
        y = y + rng.uniform(0.0, 1.0, y.shape) * 0.1 * y.max()
    states = [f"x{i + 1}" for i in range(p)]
    names = [f"phi{i + 1}" for i in range(p)]
    data = pd.DataFrame(y, index=pd.Index(times, name="time"), columns=states)
    params = [Parameter(nm, float(start), lb=bounds[0], ub=bounds[1]) for nm in names]
    prob = EstimationProblem(
        states=states, parameters=params,
        rhs=lambda x, u, t: [u[k] * x[k] for k in range(p)],
        initial={s: 1.0 for s in states}, data=data,
        loss=GaussianNLL(np.eye(p)) if loss is None else loss, name=f"diagonal_linear_{p}")
    prob.true_values = phi
    return prob


def _misfit_derivatives(u, problem):
    """Times t, exact states Xm (N, p) at φ = ``u``, ∇_xφ_j (N, p) and φ_{j,xx} (N, p, p)
    of the problem's loss at Xm."""
    p = len(problem.states)
    if len(problem.parameters) != p or problem.obs_names != problem.states:
        raise ValueError("not a diagonal linear problem (see diagonal_linear_problem)")
    t = problem.meas_times
    Xm = diagonal_linear_solution(u, t)
    Z = problem.data.to_numpy()
    G = np.zeros((len(t), p))
    Hxx = np.zeros((len(t), p, p))
    for j in range(len(t)):
        obs = np.flatnonzero(problem.mask[j])
        r = Xm[j, obs] - Z[j, obs]
        if isinstance(problem.loss, GaussianNLL):
            A = np.linalg.inv(problem.cov[np.ix_(obs, obs)])
        else:
            A = 2.0 * np.diag(problem.weights[j, obs])
        G[j, obs] = A @ r
        Hxx[j][np.ix_(obs, obs)] = A
    return t, Xm, G, Hxx


def diagonal_linear_exact_gradient(u, problem):
    r"""Closed-form gradient (from eq. (25)).

    .. math:: \nabla_k J = \sum_j t_j\, x_k(t_j)\,(\nabla_x\varphi_j)_k .

    Parameters
    ----------
    u : array (p,)
        φ.
    problem : EstimationProblem
        From :func:`diagonal_linear_problem` (its data, mask, weights and loss
        are used; x(0) = 1).
    """
    t, Xm, G, _ = _misfit_derivatives(u, problem)
    return np.sum(t[:, None] * Xm * G, axis=0)


def diagonal_linear_exact_hessian(u, problem):
    r"""Closed-form Hessian [MHV, eqs. (28)–(29) for any loss].

    .. math::

        H_{kl} = \sum_j t_j^2 x_k x_l (\varphi_{j,xx})_{kl}
                 + \delta_{kl}\sum_j t_j^2 x_k (\nabla_x\varphi_j)_k .
    """
    t, Xm, G, Hxx = _misfit_derivatives(u, problem)
    D = t[:, None] * Xm                                # ∂x_k(t_j)/∂φ_k
    H = np.einsum("jk,jkl,jl->kl", D, Hxx, D)
    H += np.diag(np.sum(t[:, None] ** 2 * Xm * G, axis=0))
    return H
