"""PEtab import and export (optional extra ``petab``: petab, python-libsbml).

A PEtab problem (an SBML model plus tables of conditions, observables,
measurements and parameters) is read into a symbolic :class:`PetabModel`;
:func:`petab_nll` evaluates its negative log-likelihood by simulation.
"""
from ._sbml import UnsupportedFeatureError, read_sbml, math_to_sympy, SbmlOde
from ._tables import PetabModel, PetabObservable, PetabParameter, read_petab
from ._likelihood import PetabSimulator, petab_nll

__all__ = ["UnsupportedFeatureError", "read_sbml", "math_to_sympy", "SbmlOde", "PetabModel",
           "PetabObservable", "PetabParameter", "read_petab", "PetabSimulator", "petab_nll"]
from ._problem import PetabEstimation, petab_problem

__all__ += ["PetabEstimation", "petab_problem"]
from ._export import write_petab

__all__ += ["write_petab"]
from ._fit import PetabFit, fit_petab

__all__ += ["PetabFit", "fit_petab"]
