"""Griffe extension for the API reference: the package's docstrings use
reStructuredText roles (``:math:``, ``:class:``, ``.. math::``); this turns them
into the Markdown that the MkDocs site renders.

* ``:math:`x``` -> ``$x$`` and ``.. math::`` blocks -> ``$$ ... $$`` (rendered by
  pymdownx.arithmatex and MathJax);
* ``:class:`~a.b.C``` and the other object roles -> a cross-reference ``[C][path]``
  when the target (absolute, or relative to the documented object) is an object
  the reference renders, else the name as code.

Loaded by mkdocstrings (``extensions:`` in ``mkdocs.yml``).
"""
from __future__ import annotations

import importlib
import inspect
import re

import griffe

ROLE = re.compile(r":(class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")
MATH = re.compile(r":math:`([^`]*)`")
DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*(.*)$")


def api_units():
    """The top-level subpackages and modules of pyomo_odeest that have an API page:
    every one with ``__all__`` (the entry points ``cli``, ``demo``, ``__main__`` aside)."""
    import pkgutil

    import pyomo_odeest
    units = []
    for info in pkgutil.iter_modules(pyomo_odeest.__path__):
        if info.name in ("cli", "demo", "__main__"):
            continue
        if hasattr(importlib.import_module(f"pyomo_odeest.{info.name}"), "__all__"):
            units.append(info.name)
    return units


def documented_path(package, name):
    """Where the API pages document ``package.name``: a name that is also a
    submodule of the package (``approaches.estimate``) is documented inside it."""
    try:
        importlib.import_module(f"{package}.{name}")
    except ImportError:
        return f"{package}.{name}"
    return f"{package}.{name}.{name}"


def _rendered():
    """{id(object): documented path} for every public name of the API pages."""
    import pyomo_odeest
    out = {}
    for sub in api_units():
        mod = importlib.import_module(f"pyomo_odeest.{sub}")
        out.setdefault(id(mod), f"pyomo_odeest.{sub}")
        for name in getattr(mod, "__all__", ()):
            out.setdefault(id(getattr(mod, name)), documented_path(f"pyomo_odeest.{sub}", name))
    for name in pyomo_odeest.__all__:
        obj = getattr(pyomo_odeest, name)
        out.setdefault(id(obj), None)
    return {k: v for k, v in out.items() if v}


def _lookup(path):
    """The Python object at a dotted path, or None."""
    if not path.startswith("pyomo_odeest"):
        return None
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except (ImportError, ValueError):
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


class RstRoles(griffe.Extension):
    def __init__(self):
        self._paths = None

    def _target(self, target, obj):
        """Documented path of ``target`` seen from griffe object ``obj``, or None."""
        if self._paths is None:
            self._paths = _rendered()
        candidates = []
        if target.startswith("."):
            base = obj.module if obj.is_module else obj.module
            pkg = base.path if base.is_package else base.path.rsplit(".", 1)[0]
            rel = target.lstrip(".")
            up = len(target) - len(rel) - 1
            pkg = pkg.rsplit(".", up)[0] if up else pkg
            candidates.append(f"{pkg}.{rel}")
        else:
            candidates.append(target)
            scope = obj
            while scope is not None:
                candidates.append(f"{scope.path}.{target}")
                scope = scope.parent
        for cand in candidates:
            py = _lookup(cand)
            if py is None:
                continue
            if id(py) in self._paths:
                return self._paths[id(py)]
            owner, _, attr = cand.rpartition(".")
            cls = _lookup(owner)
            if inspect.isclass(cls) and id(cls) in self._paths:
                return f"{self._paths[id(cls)]}.{attr}"
        return None

    def _convert(self, text, obj):
        lines, out, i = text.split("\n"), [], 0
        while i < len(lines):
            m = DIRECTIVE.match(lines[i])
            if not m:
                out.append(lines[i])
                i += 1
                continue
            indent, first = m.group(1), m.group(2).strip()
            body = [first] if first else []
            i += 1
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
                body.append(lines[i].strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            body = [b for b in body if b] if not first else body
            out += [f"{indent}$$", *(f"{indent}{b}" for b in body if b), f"{indent}$$", ""]
        text = "\n".join(out)
        text = MATH.sub(lambda m: f"${m.group(1).strip()}$", text)

        def role(m):
            kind, tilde, target = m.groups()
            target = target.strip()
            title = target.rsplit(".", 1)[-1] if tilde or target.startswith(".") else target
            if kind in ("func", "meth"):
                title += "()"
            path = self._target(target.rstrip("()"), obj)
            return f"[`{title}`][{path}]" if path else f"`{title}`"

        return ROLE.sub(role, text)

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = self._convert(obj.docstring.value, obj)
