"""PEtab import and export (optional extra ``petab``: petab, python-libsbml).

A PEtab problem (an SBML model plus tables of conditions, observables,
measurements and parameters) is read into a symbolic :class:`PetabModel`;
:func:`petab_nll` evaluates its negative log-likelihood by simulation.
"""
from .sbml import UnsupportedFeatureError, read_sbml, math_to_sympy, SbmlOde
from .tables import PetabModel, PetabObservable, PetabParameter, read_petab
from .likelihood import PetabSimulator, petab_nll

__all__ = ["UnsupportedFeatureError", "read_sbml", "math_to_sympy", "SbmlOde", "PetabModel",
           "PetabObservable", "PetabParameter", "read_petab", "PetabSimulator", "petab_nll"]
from .problem import PetabEstimation, petab_problem

__all__ += ["PetabEstimation", "petab_problem"]
from .export import write_petab

__all__ += ["write_petab"]
