"""Pyomo layer: the scheme rendered as a Pyomo block (:mod:`.block`), the
adaptive-step block (:mod:`.adaptive_block`), the pyomo.dae transformations
``odeest.*`` (:mod:`.dae`), and the ASL-free solver
``SolverFactory('odeest_ipopt')`` (:mod:`.solver`) with its evaluator of Pyomo
expression trees (:mod:`.evaluator`, :mod:`.family`); and a build of PyNumero's ASL
interface against a system ASL for Pyomo's and IDAES's ASL-based tools
(:mod:`.pynumero_asl`)."""
from .evaluator import PyomoNLPEvaluator, UnsupportedModelError
from .solver import SOLVER_NAME, OdeestIpoptSolver, use_as_ipopt
from .block import add_objective_term, build_block, scheme_constraint
from .experiments import build_experiment_blocks
from .adaptive_block import build_adaptive_block, estimate_adaptive
from .dae import (AdamsTransformation, DaeSchemeError, EnrightTransformation, dae_result,
                  problem_from_dae)

__all__ = ["PyomoNLPEvaluator", "UnsupportedModelError", "SOLVER_NAME", "OdeestIpoptSolver",
           "add_objective_term", "build_block", "build_experiment_blocks", "scheme_constraint", "build_adaptive_block",
           "estimate_adaptive", "AdamsTransformation", "DaeSchemeError", "EnrightTransformation",
           "problem_from_dae", "dae_result", "use_as_ipopt"]
