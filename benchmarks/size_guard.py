"""Peak memory per unknown of the discretized problem: the constants of the size guard.

Measures the growth of the process's peak resident memory while building the
simultaneous approach's Pyomo block with its evaluator (Jacobian and Hessian
evaluated once) and the reduced space's discrete model (gradient and
second-order-adjoint Hessian evaluated once), Lotka–Volterra with adams_pc,
each in a fresh process, and compares with
``pyomo_odeest.discretization._size_guard.BYTES_PER_UNKNOWN``.

Run:  python benchmarks/size_guard.py
Last line:  size_guard: simultaneous_bytes_per_unknown=... reduced_bytes_per_unknown=...
"""
import subprocess
import sys

CHILD = r'''
import resource, sys
import numpy as np
from pyomo_odeest.models import lotka_volterra_problem
what, spi = sys.argv[1], int(sys.argv[2])
P = lotka_volterra_problem(p0=(0.9,) * 4)
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if what == "simultaneous":
    import pyomo.environ as pyo
    from pyomo_odeest.transcription._block import build_block
    from pyomo_odeest.nlp._evaluator import PyomoNLPEvaluator
    m = pyo.ConcreteModel()
    m.est = build_block(P, "adams_pc", 4, steps_per_interval=spi)
    ev = PyomoNLPEvaluator(m)
    ev.jacobian(ev.x0)
    ev.hessian(ev.x0, np.ones(ev.m), 1.0)
else:
    from pyomo_odeest.discretization.discrete import DiscreteModel
    dm = DiscreteModel(P, "adams_pc", 4, steps_per_interval=spi)
    dm.gradient(P.u0)
    dm.hessian(P.u0, "soa")
from pyomo_odeest.problem._validation import estimate_size
est = estimate_size(P, what, "adams_pc", 4, None, None, spi)
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(est.unknowns, (r1 - r0) * 1024)
'''


def measure(what, spi):
    out = subprocess.run([sys.executable, "-c", CHILD, what, str(spi)], capture_output=True,
                         text=True, check=True).stdout.split()
    unknowns, grown = int(out[-2]), int(out[-1])
    return unknowns, grown / unknowns


def main():
    from pyomo_odeest.discretization._size_guard import BYTES_PER_UNKNOWN
    res = {}
    for what, spi in (("simultaneous", 400), ("reduced_space", 1000)):
        n, b = measure(what, spi)
        res[what] = b
        print(f"{what:>13}: {n} unknowns, {b:.0f} bytes per unknown "
              f"(size guard assumes {BYTES_PER_UNKNOWN[what]})")
    print(f"size_guard: simultaneous_bytes_per_unknown={res['simultaneous']:.0f} "
          f"reduced_bytes_per_unknown={res['reduced_space']:.0f}")


if __name__ == "__main__":
    main()
