"""Symbolic layer (bottom): Pyomo expression trees read into sympy, sympy
rendered back into Pyomo, and vectorised numeric functions lambdified from
sympy.  Everything above uses these; they use nothing of the package.

Re-exported by :mod:`pyomo_odeest` (the user API): none.

Building blocks, importable from here only (``__building_blocks__``): the symbolic
machinery that the layers above build on: ``UnsupportedExpressionError``, ``to_sympy``,
``walk``, ``TreeDerivatives``, ``differentiate_structure``, ``pyomo_to_sympy``,
``sympy_to_pyomo``, ``SparseJacobian``, ``VectorFn``, ``lambdify``,
``second_derivatives``, ``sparse_jacobian``.
"""
from ._structure import UnsupportedExpressionError, to_sympy, walk
from ._treediff import TreeDerivatives, differentiate_structure
from ._lambdify import lambdify
from ._convert import pyomo_to_sympy, sympy_to_pyomo
from ._vectorfn import SparseJacobian, VectorFn, second_derivatives, sparse_jacobian

__all__ = ["UnsupportedExpressionError", "to_sympy", "walk", "TreeDerivatives", "differentiate_structure", "pyomo_to_sympy", "sympy_to_pyomo",
           "SparseJacobian", "VectorFn", "lambdify", "second_derivatives", "sparse_jacobian"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("UnsupportedExpressionError", "to_sympy", "walk", "TreeDerivatives",
                       "differentiate_structure", "pyomo_to_sympy", "sympy_to_pyomo",
                       "SparseJacobian", "VectorFn", "lambdify", "second_derivatives",
                       "sparse_jacobian")
