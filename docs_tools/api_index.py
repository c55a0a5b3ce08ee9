"""Write docs/api/index.md: the table of the top-level names and of the API pages.

Run ``python docs_tools/api_index.py`` after adding public names or subpackages
(tests/test_docs.py checks that every name of ``pyomo_odeest.__all__`` is listed;
tests/test_architecture.py that every other name of a subpackage's ``__all__`` is
one of its ``__building_blocks__``).
"""
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "docs_tools")]

from rst_roles import api_units, documented_path  # noqa: E402

#: API pages in the order of the layers (docs/architecture.md), bottom first.
ORDER = ["symbolic", "problem", "discretization", "nlp", "optimizers", "transcription", "approaches",
         "analysis", "models", "petab_io"]


def main():
    import pyomo_odeest
    units = api_units()
    order = [u for u in ORDER if u in units] + sorted(set(units) - set(ORDER))
    where = {}
    for u in order:
        mod = importlib.import_module(f"pyomo_odeest.{u}")
        for n in mod.__all__:
            where.setdefault(id(getattr(mod, n)), (u, documented_path(f"pyomo_odeest.{u}", n)))
    lines = ["# API reference", "",
             "Generated from the docstrings. The user API is importable from the top level",
             "(`from pyomo_odeest import estimate`): the names of the first table. Each",
             "subpackage re-exports its share of them and has, besides, building blocks for",
             "extension authors, importable from the subpackage only (its",
             "`__building_blocks__`), listed per subpackage at the end. The subpackages are",
             "listed bottom layer first, as in [the architecture](../architecture.md).", "",
             "## Top-level names (`pyomo_odeest.__all__`)", "",
             "| name | documented in |", "|---|---|"]
    for n in pyomo_odeest.__all__:
        if n == "__version__":
            continue
        u, path = where[id(getattr(pyomo_odeest, n))]
        lines.append(f"| [`{n}`][{path}] | [`pyomo_odeest.{u}`]({u}.md) |")
    lines += ["", "`__version__` is the package version string.", "", "## Subpackages", "",
              "| page | holds |", "|---|---|"]
    for u in order:
        doc = (importlib.import_module(f"pyomo_odeest.{u}").__doc__ or "").strip().split("\n\n")[0]
        doc = re.sub(r":(mod|class|func):`~?\.?([^`]+)`", lambda m: f"`{m.group(2)}`",
                     " ".join(doc.split()))
        lines.append(f"| [`pyomo_odeest.{u}`]({u}.md) | {doc} |")
    lines += ["", "## Building blocks (`__building_blocks__`)", "",
              "Importable from their subpackage only (`from pyomo_odeest.models import",
              "lotka_volterra_problem`); the top level does not re-export them.", "",
              "| subpackage | building blocks |", "|---|---|"]
    for u in order:
        mod = importlib.import_module(f"pyomo_odeest.{u}")
        names = ", ".join(f"[`{n}`][{documented_path(f'pyomo_odeest.{u}', n)}]"
                          for n in getattr(mod, "__building_blocks__", ()))
        lines.append(f"| [`pyomo_odeest.{u}`]({u}.md) | {names or 'none'} |")
    (ROOT / "docs" / "api" / "index.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
