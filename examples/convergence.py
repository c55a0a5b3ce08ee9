r"""Discrete to continuous [GM-conv, Theorem 1] on the Lotka–Volterra problem.

For uniform steps h = T/k, k = 20 ... 640, and the Adams predictor–corrector
with the order ramp (Q_max = 2 and 3), the script prints the table of
:func:`pyomo_odeest.analysis._convergence.convergence_study`: the relative error of the
discrete-adjoint gradient ∇J_k(u) against the continuous gradient ∇J(u)
(continuous adjoint, DOP853 at rtol 1e-12) at the start values, the relative
distance of the discrete minimizer u_k from the continuous minimizer u*, and
the observed rates.  The expected rate is min(3, Q_max) (see docs/schemes.md).

Usage: ``python examples/convergence.py [output_dir]`` (writes
``convergence_qmax2.png`` and ``convergence_qmax3.png``).  Last line::

    convergence: qmax2_grad_rate=... qmax3_grad_rate=... qmax3_param_err=...

(median observed gradient rates and the parameter error on the finest grid).
``PYOMO_ODEEST_EXAMPLE_QUICK=1``: k = 20, 40, 80 only.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np

from pyomo_odeest.analysis._convergence import convergence_study
from pyomo_odeest.models import lotka_volterra_problem

QUICK = os.environ.get("PYOMO_ODEEST_EXAMPLE_QUICK") == "1"
KS = (20, 40, 80) if QUICK else (20, 40, 80, 160, 320, 640)


def main(outdir="."):
    os.makedirs(outdir, exist_ok=True)
    warnings.simplefilter("ignore", RuntimeWarning)
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    out = {}
    for qmax in (2, 3):
        st = convergence_study(prob, ks=KS, qmax=qmax)
        print(f"Adams PC, Q_max = {qmax} (expected rate {st.expected_rate}); "
              f"u* = {np.round(st.u_star, 6)}")
        print(st.table.to_string(index=False, float_format=lambda v: f"{v:.3e}"))
        print()
        try:
            st.plot(os.path.join(outdir, f"convergence_qmax{qmax}.png"))
        except ImportError:
            pass
        out[qmax] = st
    r2 = float(np.nanmedian(out[2].table["grad_rate"]))
    r3 = float(np.nanmedian(out[3].table["grad_rate"]))
    pe = float(out[3].table["parameter_error"].iloc[-1])
    print(f"convergence: qmax2_grad_rate={r2:.2f} qmax3_grad_rate={r3:.2f} qmax3_param_err={pe:.2e}")
    return out


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
