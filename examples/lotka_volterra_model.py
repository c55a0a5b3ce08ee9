"""Problem file for the command line: [AT]'s Lotka–Volterra model.

Run:  pyomo-odeest examples/lotka_volterra_model.py examples/lotka_volterra_data.csv --out lv_out
"""
from pyomo_odeest import Parameter

states = ["x1", "x2"]
parameters = [Parameter("p1", 0.5), Parameter("p2", 0.5), Parameter("p3", 0.5),
              Parameter("p4", -0.2)]


def rhs(x, u, t):
    return [-u.p1 * x.x1 + u.p2 * x.x1 * x.x2,
            u.p3 * x.x2 - u.p4 * x.x1 * x.x2]


initial = {"x1": 0.4, "x2": 1.0}
options = {"scheme": "adams_pc", "qmax": 4, "steps_per_interval": 10}
