"""Peak memory per unknown of the discretized problem: the constants of the size guard.

Measures the growth of the process's peak resident memory while building the
simultaneous approach's Pyomo block with its evaluator (Jacobian and Hessian
evaluated once) and the reduced space's discrete model (gradient and
second-order-adjoint Hessian evaluated once), Lotka–Volterra with adams_pc,
each in a fresh process, at two sizes; the bytes per unknown are the growth
between them (the fixed cost of compiled code and its imports drops out), and
are compared with ``pyomo_odeest.discretization._size_guard.BYTES_PER_UNKNOWN``.

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
from pyomo_odeest.discretization._size_guard import estimate_size
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
    for what, sizes in (("simultaneous", (400, 2000)), ("reduced_space", (1000, 20000))):
        (n1, b1), (n2, b2) = (measure(what, spi) for spi in sizes)
        # the growth between two sizes: what the guard scales with the unknowns (the
        # fixed cost of the first evaluation, compiled code and its imports, drops out)
        res[what] = (b2 * n2 - b1 * n1) / (n2 - n1)
        print(f"{what:>13}: {n1} -> {n2} unknowns, {res[what]:.0f} bytes per added unknown "
              f"({b1:.0f} -> {b2:.0f} per unknown with the fixed cost; "
              f"size guard assumes {BYTES_PER_UNKNOWN[what]})")
    print(f"size_guard: simultaneous_bytes_per_unknown={res['simultaneous']:.0f} "
          f"reduced_bytes_per_unknown={res['reduced_space']:.0f}")


if __name__ == "__main__":
    main()
