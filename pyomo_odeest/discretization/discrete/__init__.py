r"""The discrete problem of the block in numpy: simulation, gradients, Hessians.

The unknowns of the Pyomo block are ordered in *blocks* of n values:
``w = (x_0, [stages of step 0 ..., x_1], [stages of step 1 ..., x_2], ...)``.
Every block has one residual [GM-grad, eq. (2) and the stage equations of
:mod:`pyomo_odeest.discretization.schemes`]:

.. math::

    G_0 = x_0 - l(u), \qquad
    G_b = v_b - x_i - \sum_{\text{f-terms}} c\, f(w_{P}, u, t_P)
                    - \sum_{\text{ḟ-terms}} d\, \dot f(w_P, u, t_P),

with ``c = h_i × coefficient`` and ``d = h_i² × coefficient``.  ``∂G/∂w`` is
block lower triangular: diagonal blocks are ``I`` for explicit stages and
``I - c f_x - d ḟ_x`` (own point) for implicit ones.  This package implements
Lemma 1 of [GM-grad] on exactly these equations:

* forward simulation = block forward substitution (Newton on implicit blocks);
* discrete adjoint = block backward substitution of
  ``(∂G/∂w)ᵀ p = -∇_w F`` (the stage-wise form of eq. (52)), gradient (13)/(54);
* discrete sensitivity = block forward substitution of
  ``(∂G/∂w) M = -∂G/∂u`` (eq. (51)), gradient (53);
* the same adjoint by one sparse LU solve of the assembled transposed
  Jacobian (``transposed_solve``), an independent check;
* Hessians: second-order adjoint [GM-grad, §2.5], adjoint + finite
  differences [MHV, eq. (21)], Gauss–Newton.

The objective is ``F(w, u) = Σ_j φ_j``, ``φ_j = r_jᵀ A_j r_j`` with
``r_j = g(x_{J(j)}, u, τ_j) − z̄_j`` and ``A_j = diag(w_j)`` (least squares) or
``½ Σ_oo⁻¹`` (Gaussian NLL), the same J_k as ``b.misfit`` of the block.

The class :class:`DiscreteModel` is assembled from one module per responsibility:
:mod:`.equations` (layout of the blocks, G, ∂G/∂w, ∂G/∂u, F and ∇F),
:mod:`.simulation` (forward solve of G(w, u) = 0),
:mod:`.first_order` (adjoint, sensitivities, gradients) and
:mod:`.second_order` (Hessians).
"""
from ._model import DiscreteModel
from ._simulation import SimulationError, Trajectory

__all__ = ["DiscreteModel", "Trajectory", "SimulationError"]
