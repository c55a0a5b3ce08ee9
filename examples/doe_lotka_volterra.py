"""pyomo.contrib.doe's Fisher information of the package's Lotka–Volterra block.

The Lotka–Volterra problem of [AT] is rendered as the package's Pyomo block
(:func:`pyomo_odeest.build_block`, Adams predictor–corrector), labelled as a
pyomo.contrib.doe ``Experiment`` (outputs: both states at the measurement
times, measurement error 1; unknown parameters: p1..p4), and DoE computes
its FIM by central finite differences (``compute_FIM(method='sequential')``:
one square solve of the block per perturbed parameter, each by
``odeest_ipopt``; DoE clones the model for that).

The reference is the package's own Gauss–Newton FIM on the same
discretization at the same point, ``Σ_j S_jᵀ S_j`` with the exact discrete
sensitivities S_j of the observations [GM-grad, eq. (51)]
(:func:`pyomo_odeest.analysis._uncertainty.curvature`).  The point is the
reduced-space estimate.

Usage: python examples/doe_lotka_volterra.py
The last line is ``doe: fim_diag=(...) rel_err_vs_gauss_newton=...``
(largest entry-wise difference relative to the largest FIM entry).
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from pyomo_odeest import build_block, estimate_reduced
from pyomo_odeest.transcription import initialize_block
from pyomo_odeest.analysis._uncertainty import curvature
from pyomo_odeest.models import lotka_volterra_problem

SCHEME, QMAX, STEPS = "adams_pc", 3, 5


def lv_experiment(problem, theta):
    """The block as a pyomo.contrib.doe / parmest ``Experiment`` at parameters ``theta``."""
    from pyomo.contrib.parmest.experiment import Experiment

    class LotkaVolterraExperiment(Experiment):
        def get_labeled_model(self):
            m = pyo.ConcreteModel()
            m.est = b = build_block(problem, SCHEME, QMAX, steps_per_interval=STEPS)
            for p, v in zip(problem.parameter_names, theta):
                b.u[p].fix(float(v))
            initialize_block(b, init="simulate")    # states on the scheme's trajectory
            b.objective.deactivate()                # DoE solves the square system only
            J = np.asarray(b.grid.J)
            data = problem.data
            m.experiment_outputs = pyo.Suffix(direction=pyo.Suffix.LOCAL)
            m.measurement_error = pyo.Suffix(direction=pyo.Suffix.LOCAL)
            for j, i in enumerate(J):
                for s in problem.states:
                    m.experiment_outputs[b.x[int(i), s]] = float(data[s].iloc[j])
                    m.measurement_error[b.x[int(i), s]] = 1.0
            m.unknown_parameters = pyo.Suffix(direction=pyo.Suffix.LOCAL)
            m.unknown_parameters.update((b.u[p], b.u[p].value) for p in problem.parameter_names)
            m.experiment_inputs = pyo.Suffix(direction=pyo.Suffix.LOCAL)
            return m

    return LotkaVolterraExperiment()


def run(step=1e-4):
    from pyomo.contrib.doe import DesignOfExperiments

    problem = lotka_volterra_problem(p0=[0.8, 0.8, 0.8, 0.8])
    # the FIM is compared on this grid: its own optimum (certify=False keeps the grid)
    res = estimate_reduced(problem, SCHEME, QMAX, steps_per_interval=STEPS, certify=False)
    theta = res.estimates.reindex(problem.parameter_names).to_numpy(dtype=float)
    fim_gn = curvature(res, problem=problem).fim()
    doe = DesignOfExperiments(lv_experiment(problem, theta), fd_formula="central", step=step,
                              scale_nominal_param_value=False,
                              solver=pyo.SolverFactory("odeest_ipopt", options={"tol": 1e-12}))
    fim_doe = np.asarray(doe.compute_FIM(method="sequential"))
    rel = float(np.max(np.abs(fim_doe - fim_gn)) / np.max(np.abs(fim_gn)))
    return dict(theta=theta, fim_doe=fim_doe, fim_gn=fim_gn, rel_err=rel)


def main():
    r = run()
    np.set_printoptions(precision=5, suppress=True)
    print("estimate:", r["theta"])
    print("FIM, pyomo.contrib.doe (central differences):\n", r["fim_doe"])
    print("FIM, Gauss-Newton with exact discrete sensitivities:\n", r["fim_gn"])
    d = ", ".join(f"{v:.4g}" for v in np.diag(r["fim_doe"]))
    print(f"doe: fim_diag=({d}) rel_err_vs_gauss_newton={r['rel_err']:.2e}")


if __name__ == "__main__":
    main()
