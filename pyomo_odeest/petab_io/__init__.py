"""PEtab import and export (optional extra ``petab``: petab, python-libsbml).

A PEtab problem (an SBML model plus tables of conditions, observables,
measurements and parameters) is read into a symbolic :class:`PetabModel`;
:func:`petab_nll` evaluates its negative log-likelihood by simulation.

Re-exported by :mod:`pyomo_odeest` (the user API): ``UnsupportedFeatureError``,
``PetabModel``, ``read_petab``, ``petab_nll``, ``PetabEstimation``, ``petab_problem``,
``write_petab``, ``PetabFit``, ``fit_petab``.

Building blocks, importable from here only (``__building_blocks__``): the SBML reader,
the tables' pieces and the simulator behind ``petab_nll``: ``read_sbml``,
``math_to_sympy``, ``SbmlOde``, ``PetabObservable``, ``PetabParameter``,
``PetabSimulator``.
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

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("read_sbml", "math_to_sympy", "SbmlOde", "PetabObservable", "PetabParameter",
                       "PetabSimulator")
