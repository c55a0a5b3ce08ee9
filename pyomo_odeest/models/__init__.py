"""Test problems of the source papers ([GM-grad], [AT], [MHV], [SEIRD]) and
published problems with known optima, as ready-made EstimationProblems.

Re-exported by :mod:`pyomo_odeest` (the user API): none.

Building blocks, importable from here only (``__building_blocks__``): the test problems,
their data and their known optima stay in this namespace (``from pyomo_odeest.models
import lotka_volterra_problem``): ``lotka_volterra_data``, ``lotka_volterra_problem``,
``LV_P0``, ``LV_TRUE``, ``diagonal_linear_problem``, ``diagonal_linear_exact_gradient``,
``diagonal_linear_exact_hessian``, ``diagonal_linear_solution``, ``HIV_PARAMETERS``,
``HIV_ESTIMATED``, ``HIV_STATES``, ``HIV_TIMES``, ``hiv_problem``, ``hiv_simulate``,
``seird_problem``, ``seird_data``, ``seird_solution``, ``OSC_OMEGA``,
``oscillator_data``, ``oscillator_problem``, ``pinene_problem``, ``gasoil_problem``,
``PINENE_OPTIMUM``, ``GASOIL_OPTIMUM``, ``marine_problem``, ``MARINE_OPTIMUM``,
``methanol_problem``, ``METHANOL_OPTIMUM``, ``bellman_problem``, ``BELLMAN_OPTIMUM``,
``BELLMAN_K``, ``FED_BATCH_FEEDS``, ``FED_BATCH_TRUE``, ``fed_batch_problem``,
``robertson_problem``, ``ROBERTSON_LOG_K``, ``pk_infusion_problem``, ``PK_TRUE``.
"""
from ._lotka_volterra import lotka_volterra_data, lotka_volterra_problem, LV_P0, LV_TRUE
from ._diagonal_linear import (diagonal_linear_problem, diagonal_linear_exact_gradient,
                              diagonal_linear_exact_hessian, diagonal_linear_solution)
from ._seird import seird_problem, seird_data, seird_solution
from ._bellman import BELLMAN_K, BELLMAN_OPTIMUM, bellman_problem
from ._cops import (GASOIL_OPTIMUM, MARINE_OPTIMUM, METHANOL_OPTIMUM, PINENE_OPTIMUM,
                   gasoil_problem, marine_problem, methanol_problem, pinene_problem)
from ._oscillator import OSC_OMEGA, oscillator_data, oscillator_problem
from ._fed_batch import FED_BATCH_FEEDS, FED_BATCH_TRUE, fed_batch_problem
from ._kinetics import PK_TRUE, ROBERTSON_LOG_K, pk_infusion_problem, robertson_problem
from ._hiv import HIV_PARAMETERS, HIV_ESTIMATED, HIV_STATES, HIV_TIMES, hiv_problem, hiv_simulate

__all__ = ["lotka_volterra_data", "lotka_volterra_problem", "LV_P0", "LV_TRUE",
           "diagonal_linear_problem", "diagonal_linear_exact_gradient",
           "diagonal_linear_exact_hessian", "diagonal_linear_solution",
           "HIV_PARAMETERS", "HIV_ESTIMATED", "HIV_STATES", "HIV_TIMES", "hiv_problem",
           "hiv_simulate", "seird_problem", "seird_data", "seird_solution",
           "OSC_OMEGA", "oscillator_data", "oscillator_problem", "pinene_problem", "gasoil_problem", "PINENE_OPTIMUM", "GASOIL_OPTIMUM",
           "marine_problem", "MARINE_OPTIMUM", "methanol_problem", "METHANOL_OPTIMUM", "bellman_problem", "BELLMAN_OPTIMUM", "BELLMAN_K",
           "FED_BATCH_FEEDS", "FED_BATCH_TRUE", "fed_batch_problem",
           "robertson_problem", "ROBERTSON_LOG_K", "pk_infusion_problem", "PK_TRUE"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("lotka_volterra_data", "lotka_volterra_problem", "LV_P0", "LV_TRUE",
                       "diagonal_linear_problem", "diagonal_linear_exact_gradient",
                       "diagonal_linear_exact_hessian", "diagonal_linear_solution",
                       "HIV_PARAMETERS", "HIV_ESTIMATED", "HIV_STATES", "HIV_TIMES", "hiv_problem",
                       "hiv_simulate", "seird_problem", "seird_data", "seird_solution", "OSC_OMEGA",
                       "oscillator_data", "oscillator_problem", "pinene_problem", "gasoil_problem",
                       "PINENE_OPTIMUM", "GASOIL_OPTIMUM", "marine_problem", "MARINE_OPTIMUM",
                       "methanol_problem", "METHANOL_OPTIMUM", "bellman_problem", "BELLMAN_OPTIMUM",
                       "BELLMAN_K", "FED_BATCH_FEEDS", "FED_BATCH_TRUE", "fed_batch_problem",
                       "robertson_problem", "ROBERTSON_LOG_K", "pk_infusion_problem", "PK_TRUE")
