"""Test problems of the seed papers, as ready-made EstimationProblems."""
from .lotka_volterra import lotka_volterra_data, lotka_volterra_problem, LV_P0, LV_TRUE

__all__ = ["lotka_volterra_data", "lotka_volterra_problem", "LV_P0", "LV_TRUE"]
