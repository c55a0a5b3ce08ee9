r"""Build Pyomo's PyNumero ASL interface against a system AMPL Solver Library.

PyNumero's ``PyomoNLP`` (IDAES's numerical diagnostics, Pyomo's
``SolverFactory('cyipopt')``) loads ``libpynumero_ASL.so``; this module compiles it
from the C++ source that ships inside Pyomo
(``pyomo/contrib/pynumero/src/AmplInterface.cpp``) against a system ASL, and
installs it into Pyomo's configuration directory (``PYOMO_CONFIG_DIR/lib``)::

    apt install libamplsolver-dev g++
    python -m pyomo_odeest.nlp._pynumero_asl

See docs/solver.md, section "IDAES, PyNumero and Pyomo's own ``cyipopt`` interface".
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["build_pynumero_asl", "pynumero_asl_available", "PynumeroBuildError"]

#: Where Debian's ``libamplsolver-dev`` puts the ASL headers.
DEFAULT_INCLUDE_DIRS = ("/usr/include/ampl-netlib-solvers", "/usr/local/include/asl",
                        "/usr/include/asl")


class PynumeroBuildError(RuntimeError):
    """The PyNumero ASL interface could not be built; the message says what is missing."""


def pynumero_asl_available() -> bool:
    """True if PyNumero's ASL interface loads (``PyomoNLP`` works)."""
    from pyomo.contrib.pynumero.asl import AmplInterface
    return bool(AmplInterface.available())


def _find_include(include_dir):
    cands = [include_dir] if include_dir else list(DEFAULT_INCLUDE_DIRS)
    for d in cands:
        if d and (Path(d) / "asl_pfgh.h").is_file():
            return Path(d)
    where = ", ".join(str(c) for c in cands)
    raise PynumeroBuildError(
        f"the AMPL Solver Library headers (asl_pfgh.h) are not in {where}; on Debian or "
        f"Ubuntu: apt install libamplsolver-dev (or pass include_dir=... and lib_dir=...)")


def build_pynumero_asl(dest: str | os.PathLike | None = None, include_dir: str | None = None,
                       lib_dir: str | None = None, compiler: str | None = None,
                       quiet: bool = True) -> Path:
    """Compile ``libpynumero_ASL.so`` and return its path.

    Parameters
    ----------
    dest:
        Directory for the library; default ``PYOMO_CONFIG_DIR/lib`` (where
        Pyomo looks for it without further configuration).
    include_dir, lib_dir:
        The ASL's headers (containing ``asl_pfgh.h``) and library
        (``libamplsolver``); default: Debian's ``libamplsolver-dev`` locations
        and the linker's search path.
    compiler:
        A C++ compiler; default ``$CXX``, else ``g++``, else ``c++``.

    Raises
    ------
    PynumeroBuildError
        With what is missing (headers, compiler) or the compiler's message.
    """
    import pyomo
    from pyomo.common.envvar import PYOMO_CONFIG_DIR

    src = Path(pyomo.__file__).parent / "contrib" / "pynumero" / "src"
    if not (src / "AmplInterface.cpp").is_file():
        raise PynumeroBuildError(f"this Pyomo ({pyomo.__version__}) does not ship "
                                 f"{src / 'AmplInterface.cpp'}")
    inc = _find_include(include_dir)
    cxx = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx or not shutil.which(cxx):
        raise PynumeroBuildError("no C++ compiler found (set CXX, or apt install g++)")
    out_dir = Path(dest) if dest is not None else Path(PYOMO_CONFIG_DIR) / "lib"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "libpynumero_ASL.so"
    cmd = [cxx, "-O2", "-shared", "-fPIC", "-DBUILDING_PYNUMERO_ASL",
           str(src / "AmplInterface.cpp"), f"-I{src}", f"-I{inc}"]
    if lib_dir:
        cmd += [f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}"]
    cmd += ["-lamplsolver", "-ldl", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PynumeroBuildError(f"compiling {src / 'AmplInterface.cpp'} failed "
                                 f"({' '.join(cmd)}):\n{proc.stderr.strip()}")
    if not quiet:
        print(f"built {out}")
    return out


def main(argv=None) -> int:
    """``python -m pyomo_odeest.nlp._pynumero_asl [DEST]``: build and check the library."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        path = build_pynumero_asl(argv[0] if argv else None, quiet=False)
    except PynumeroBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    import ctypes
    try:
        ctypes.cdll.LoadLibrary(str(path))
    except OSError as err:
        print(f"error: {path} was built but does not load: {err}", file=sys.stderr)
        return 1
    print("PyNumero's ASL interface is available (PyomoNLP, IDAES numerical diagnostics)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
