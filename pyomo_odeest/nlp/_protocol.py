"""The evaluator protocol every NLP of the package implements.

An evaluator describes

    minimize    f(x)
    subject to  g_L <= g(x) <= g_U,   x_L <= x <= x_U

with a sparsity pattern fixed at construction (rules follow the NLPModels.jl
convention: structure once, values after):

1. ``n``, ``m``: numbers of variables and constraints.
2. ``x0``, ``x_lb``, ``x_ub``, ``g_lb``, ``g_ub``: float arrays; infinite
   bounds are ``±inf``.
3. ``objective(x) -> float``, ``gradient(x) -> (n,)``.
4. ``constraints(x) -> (m,)``.
5. ``jacobian_structure() -> (rows, cols)``, ``jacobian(x) -> values``
   aligned with the structure.
6. ``hessian_structure() -> (rows, cols)`` of the *lower* triangle
   (row >= col) of the Lagrangian Hessian, and
   ``hessian(x, lam, obj_factor) -> values`` of
   ``obj_factor * ∇²f(x) + Σ_i lam_i ∇²g_i(x)``.

A failed evaluation (non-finite value, arithmetic error) raises
:class:`EvaluationError`; solver adapters turn it into a step rejection.
"""
from __future__ import annotations

import numpy as np

__all__ = ["EvaluationError", "NLPEvaluator"]


class EvaluationError(ArithmeticError):
    """A function or derivative could not be evaluated at the given point."""


def finite(v, what):
    """``v``, or an :class:`EvaluationError` ("non-finite <what>") when it is not finite."""
    if not np.all(np.isfinite(v)):
        raise EvaluationError(f"non-finite {what}")
    return v


class NLPEvaluator:
    """Base class: see the module docstring for the contract."""

    n: int
    m: int

    def objective(self, x):
        raise NotImplementedError

    def gradient(self, x):
        raise NotImplementedError

    def constraints(self, x):
        raise NotImplementedError

    def jacobian_structure(self):
        raise NotImplementedError

    def jacobian(self, x):
        raise NotImplementedError

    def hessian_structure(self):
        raise NotImplementedError

    def hessian(self, x, lam, obj_factor=1.0):
        raise NotImplementedError

    # conveniences written once on top of the protocol
    def jacobian_dense(self, x):
        r, c = self.jacobian_structure()
        J = np.zeros((self.m, self.n))
        np.add.at(J, (r, c), self.jacobian(x))
        return J

    def hessian_dense(self, x, lam, obj_factor=1.0):
        r, c = self.hessian_structure()
        H = np.zeros((self.n, self.n))
        v = self.hessian(x, lam, obj_factor)
        np.add.at(H, (r, c), v)
        off = r != c
        np.add.at(H, (c[off], r[off]), v[off])
        return H
