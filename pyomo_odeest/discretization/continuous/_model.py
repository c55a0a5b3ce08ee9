"""The assembled continuous model (equations and sign conventions: package docstring)."""
from __future__ import annotations

from ._first_order import FirstOrder
from ._forward import Forward
from ._second_order import SecondOrder

__all__ = ["ContinuousModel"]


class ContinuousModel(FirstOrder, SecondOrder, Forward):
    r"""Objective, gradient and Hessian of :math:`J(u)` on the continuous ODE solution.

    .. math::

        J(u) = \sum_{j=1}^{N}\varphi_j\big(x(\tau_j), u\big) + c,\qquad
        \dot x = f(x,u,t),\; x(t_0) = l(u)\quad\text{[MHV, eqs. (1)–(2)]}.

    Every function is derived from the problem's sympy expressions (``f_sym``,
    ``l_sym``, ``g_sym``); only nonzero entries are lambdified, and each
    right-hand side is one lambdified call (:class:`._functions._SymBundle`).

    Parameters
    ----------
    problem : EstimationProblem
    method : {'LSODA', 'BDF', 'Radau', 'DOP853', 'RK45'}
        :func:`scipy.integrate.solve_ivp` method used for every forward and
        backward integration.  The implicit ones (LSODA, BDF, Radau) receive
        exact Jacobians of the (augmented) systems.
    rtol, atol : float
        Integrator tolerances (all components, including sensitivities and
        adjoints).
    fd_step : float
        Relative step of the central finite-difference gradient.
    hessian_fd_step : float
        Relative step of the finite-difference Hessians.
    max_step : float
        Passed to ``solve_ivp``.
    sparse_jacobian : int
        Augmented systems larger than this get a ``scipy.sparse`` Jacobian
        (BDF and Radau only; LSODA needs a dense one).
    adjoint_atol : float
        Backward sweeps use, per segment between measurement times and per
        block (λ, q, μ, Q), the absolute tolerance
        ``max(atol, adjoint_atol·rtol·‖block‖∞)`` (see :func:`_segment_atol`).

    Notes
    -----
    All vectors of parameters have the length of ``problem.parameters``
    (fixed parameters included, in problem order); derivatives are with
    respect to all of them unless ``index`` selects some.

    Counters in :attr:`counts`: ``forward`` (state solves), ``sensitivity``
    (augmented forward solves), ``adjoint`` (backward sweeps), ``soa``
    (second-order adjoint sweeps), ``nfev``/``njev`` (right-hand side and
    Jacobian calls summed over all integrations).
    """
