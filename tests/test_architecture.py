"""The import rule of docs/architecture.md: a module imports only from its own
layer or the layers below it, and never a private name of another subpackage.

Imports are read with ``ast`` (top-level and inside functions alike), so a lazy
import cannot hide an upward dependency.
"""
import ast
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
