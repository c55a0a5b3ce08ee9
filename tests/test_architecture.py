"""The import rule of docs/architecture.md: a module imports only from its own
layer or the layers below it, and never a private name of another subpackage.

Imports are read with ``ast`` (top-level and inside functions alike), so a lazy
import cannot hide an upward dependency.
"""
import ast
import importlib
import re
from pathlib import Path

import pyomo_odeest

PACKAGE = Path(pyomo_odeest.__file__).resolve().parent

#: The layers, bottom first.  One place states the order; docs/architecture.md
#: draws the same list.  Every top-level module or subpackage of pyomo_odeest
#: belongs to exactly one layer.
LAYERS = [
    ["symbolic"],
    ["problem"],
    ["discretization"],
    ["nlp", "optimizers"],
    ["transcription"],
    ["approaches"],
    ["analysis"],
    ["models", "petab_io", "runner", "cli", "demo", "__main__", "__init__"],
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}

#: Upward imports allowed, as (file, imported module): none.  The approaches reach
#: the post-solve checks of the analysis layer through the registry of
#: ``problem.result`` (``post_solve_checks``), and the size guard lives in
#: ``discretization.checks``.  Keep it empty.
KNOWN_UPWARD: set = set()


def _unit(module):
    """Top-level unit of a dotted module name inside the package ('pyomo_odeest.x.y' -> 'x')."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(root=PACKAGE):
    """(importing unit, imported module, imported names, file, line) for every import."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts)
        package = module[: -len(".__init__")] if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                target, names = None, []
                for alias in node.names:
                    yield _unit(module), alias.name, [], path, node.lineno
                continue
            else:
                continue
            yield _unit(module), target, names, path, node.lineno


def test_every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())}
    assert units - set(LEVEL) == set(), (
        f"add {sorted(units - set(LEVEL))} to LAYERS in tests/test_architecture.py "
        "and to docs/architecture.md")


def _upward(root=PACKAGE):
    bad = []
    for unit, target, _, path, line in _imports(root):
        if not target.startswith("pyomo_odeest"):
            continue
        dep = _unit(target)
        if (str(path.relative_to(root.parent)), target) in KNOWN_UPWARD:
            continue
        if LEVEL[dep] > LEVEL[unit]:
            bad.append(f"{path.relative_to(root.parent)}:{line}: {unit} (layer {LEVEL[unit]}) "
                       f"imports {target} (layer {LEVEL[dep]})")
    return bad


def test_no_import_from_a_higher_layer():
    bad = _upward()
    assert not bad, "\n".join(bad)


def test_no_private_name_from_another_unit():
    """Implementation modules are private to users (``_module.py``); inside the
    package a unit may import another unit's module, never its private names."""
    bad = []
    for unit, target, names, path, line in _imports():
        if not target.startswith("pyomo_odeest") or _unit(target) == unit:
            continue
        private = [n for n in names if n.startswith("_")]
        if private:
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {target} {private}")
    assert not bad, "\n".join(bad)


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: lazy upward imports (relative or absolute) are reported,
    downward and same-layer ones are not."""
    pkg = tmp_path / "pyomo_odeest"
    (pkg / "discretization").mkdir(parents=True)
    (pkg / "discretization" / "x.py").write_text(
        "from ..problem import misfit\n"
        "from . import grid\n"
        "def f():\n"
        "    from ..analysis.checks import check_gradient\n"
        "    import pyomo_odeest.approaches._reduced\n")
    bad = _upward(pkg)
    assert len(bad) == 2 and "analysis.checks" in bad[0] and "approaches._reduced" in bad[1], bad


def test_known_upward_imports_are_still_there():
    """An entry of KNOWN_UPWARD whose import was removed must leave the list."""
    seen = {(str(path.relative_to(PACKAGE.parent)), target)
            for _, target, _, path, _ in _imports() if target}
    assert KNOWN_UPWARD <= seen, KNOWN_UPWARD - seen


def test_tests_mirror_the_package():
    """Tests of ``pyomo_odeest/<unit>/`` live in ``tests/<unit>/``: every folder of
    tests (but ``data``) is named after a subpackage, and no test module filters
    warnings for all its tests (neither at import time nor by ``pytestmark``): a
    test that expects a warning says which, on itself."""
    tests = Path(__file__).resolve().parent
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - subpackages - {"data"} == set()
    bad = []
    for path in [*tests.rglob("test_*.py"), tests / "conftest.py"]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                fn = node.value.func
                if isinstance(fn, ast.Attribute) and fn.attr in ("simplefilter", "filterwarnings"):
                    bad.append(f"{path.name}:{node.lineno}")
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                     for t in node.targets)
                    and "filterwarnings" in ast.unparse(node.value)):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"module-level warning filters: {bad}"


def test_no_module_named_after_an_installed_package():
    """A module or folder named like an installed package (``pyomo/``, ``petab/``,
    ``coverage.py``) shadows that package for any script run beside it."""
    from importlib.metadata import packages_distributions
    installed = set(packages_distributions()) - {"pyomo_odeest"}
    root = PACKAGE.parent
    clashes = []
    for base in (PACKAGE, root / "benchmarks", root / "examples", root / "docs_tools"):
        if not base.exists():
            continue
        for path in base.rglob("*"):
            name = path.stem if path.suffix == ".py" else (path.name if path.is_dir() else None)
            if name in installed:
                clashes.append(str(path.relative_to(root)))
    assert not clashes, f"named after an installed package: {clashes}"


# ---------------------------------------------------------------------------
# the public names: the top level's list and the subpackages' lists
# ---------------------------------------------------------------------------
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _subpackage(name):
    return importlib.import_module(f"pyomo_odeest.{name}")


def _undecided(sub, top_all):
    """The names of ``sub.__all__`` neither re-exported by the top level nor listed
    among the subpackage's ``__building_blocks__``, and the building blocks that are
    not in ``sub.__all__`` or are re-exported after all."""
    names, blocks = list(sub.__all__), list(getattr(sub, "__building_blocks__", ()))
    bad = [f"{n}: neither in pyomo_odeest.__all__ nor in __building_blocks__"
           for n in names if n not in top_all and n not in blocks]
    bad += [f"{n}: a building block not in __all__" for n in blocks if n not in names]
    bad += [f"{n}: a building block that the top level re-exports" for n in blocks if n in top_all]
    bad += [f"{n}: listed twice" for n in {*names, *blocks} if names.count(n) + blocks.count(n) > 2
            or names.count(n) > 1 or blocks.count(n) > 1]
    return bad


def test_every_subpackage_name_is_reexported_or_a_building_block():
    """Each name of a subpackage's ``__all__`` is decided: the top level re-exports
    it (user API) or the subpackage lists it in ``__building_blocks__`` (importable
    from the subpackage only)."""
    bad = []
    for name in SUBPACKAGES:
        sub = _subpackage(name)
        assert hasattr(sub, "__all__") and hasattr(sub, "__building_blocks__"), name
        bad += [f"pyomo_odeest.{name}: {b}" for b in _undecided(sub, pyomo_odeest.__all__)]
    assert not bad, "\n".join(bad)


def test_the_rule_catches_an_undecided_name():
    import types
    sub = types.SimpleNamespace(__all__=["estimate", "helper", "new_name"],
                                __building_blocks__=("helper", "estimate", "gone"))
    bad = _undecided(sub, ["estimate"])
    assert sorted(b.split(":")[0] for b in bad) == ["estimate", "gone", "new_name"], bad


def test_every_top_level_name_is_its_subpackage_object():
    """A top-level name is a re-export: the same object as in the subpackage whose
    ``__all__`` lists it."""
    owner = {}
    for name in SUBPACKAGES:
        sub = _subpackage(name)
        for n in sub.__all__:
            owner.setdefault(n, []).append(sub)
    bad = []
    for n in pyomo_odeest.__all__:
        if n == "__version__":
            continue
        subs = owner.get(n, [])
        if not subs:
            bad.append(f"{n}: in no subpackage's __all__")
        bad += [f"{n}: not the object of {s.__name__}" for s in subs
                if getattr(s, n) is not getattr(pyomo_odeest, n)]
    assert not bad, "\n".join(bad)
    assert len(set(pyomo_odeest.__all__)) == len(pyomo_odeest.__all__)


def _listed(doc, lead):
    """The ``names`` after the last colon of the docstring paragraph starting with
    ``lead`` (None without one)."""
    for par in doc.split("\n\n"):
        if par.strip().startswith(lead):
            return set(re.findall(r"``(\w+)``", re.split(r":\s", par)[-1]))
    return None


def test_subpackage_docstrings_state_their_lists():
    """The docstring of each subpackage lists what the top level re-exports and its
    building blocks, as ``__all__`` and ``__building_blocks__`` say."""
    bad = []
    for name in SUBPACKAGES:
        sub = _subpackage(name)
        doc = sub.__doc__ or ""
        blocks = set(sub.__building_blocks__)
        shown = {"Re-exported by :mod:`pyomo_odeest`": set(sub.__all__) - blocks,
                 "Building blocks": blocks}
        for lead, names in shown.items():
            said = _listed(doc, lead)
            if said != names:
                bad.append(f"pyomo_odeest.{name}, paragraph {lead!r}: "
                           f"{'missing' if said is None else sorted(said ^ names)}")
    assert not bad, "\n".join(bad)


#: The modules that may assign an estimation's status: where it is defined and
#: changed by a check (:func:`~pyomo_odeest.problem._status.demote`), where a result
#: normalizes it, and the driver, which takes the optimizer's.
STATUS_WRITERS = {"problem/_status.py", "problem/_result.py", "approaches/_base.py"}


def test_a_status_is_changed_by_one_rule():
    """A check changes an estimation's status only through ``demote`` (a success
    becomes the check's status; a failure keeps its first cause unless the check
    invalidates the point): no other module assigns ``<result>.status``."""
    import ast
    bad = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel in STATUS_WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                       else [])
            for t in targets:
                for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if (isinstance(el, ast.Attribute) and el.attr == "status"
                            and not (isinstance(el.value, ast.Name) and el.value.id == "self")
                            and not (isinstance(el.value, ast.Attribute)
                                     and el.value.attr in ("solver",))
                            and not (isinstance(el.value, ast.Name) and el.value.id == "soln")):
                        bad.append(f"{rel}:{node.lineno}")
    assert not bad, ("assign a status through problem._status.demote: " + ", ".join(bad))


def test_demote_lowers_a_success_and_keeps_the_first_failure():
    from types import SimpleNamespace
    from pyomo_odeest.problem._status import Status, demote
    r = SimpleNamespace(status=Status.CONVERGED, message="Solve_Succeeded")
    assert demote(r, Status.NOT_RESOLVED, "grid") and r.status is Status.NOT_RESOLVED
    assert r.message == "Solve_Succeeded; grid"
    assert not demote(r, Status.NOT_STATIONARY, "gradient") and r.status is Status.NOT_RESOLVED
    assert demote(r, "simulation_failed", "final", force=True)
    assert r.status is Status.SIMULATION_FAILED and r.message.endswith("; final")
    assert not demote(r, Status.SIMULATION_FAILED, "again", force=True)
