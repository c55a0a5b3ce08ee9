"""The pipeline's hooks take what they need and return a value: no hook changes its
arguments (``approaches/_base.py``, :class:`~pyomo_odeest.approaches.Approach`).

A spy subclass of every approach (and of a user's approach class) wraps each hook,
takes a fingerprint of every argument before the call and compares it after: the
public attributes of an object (by identity, and their own fingerprints one level
down), the items of containers and dicts, the values of arrays and of the
configuration.  An attribute set, replaced or appended to by a hook is a failure.
What the fingerprint leaves out on purpose: private attributes (an evaluator's cache
of its last point), a model's evaluation counters (``COUNTERS``: an evaluator counts
what it is asked for) and the values of Pyomo variables, which a solve of a Pyomo
model loads into the model it solves.
"""
from types import SimpleNamespace

import numpy as np
import pytest

import pyomo_odeest as po
from pyomo_odeest import APPROACH_NAMES
from pyomo_odeest.approaches import approach_class

from test_base import OPTS, TWO_EXPERIMENT_OPTS, USER, decay, two_experiments

HOOKS = ("build_experiment", "combine", "solve", "parts", "collect", "collect_experiment")
#: evaluation counters of the models and evaluators
COUNTERS = {"counts", "nsim", "ngrad", "nhess"}


def fingerprint(obj, depth=0):
    """What a hook must leave as it found it (see the module's docstring)."""
    if isinstance(obj, np.ndarray):
        return ("array", obj.shape, obj.tobytes())
    if isinstance(obj, float):
        return repr(obj)                                            # NaN is NaN
    if isinstance(obj, (str, bytes, int, complex, bool, type(None))):
        return obj
    if depth > 2:
        return id(obj)
    if hasattr(obj, "value") and hasattr(obj, "declare"):          # a ConfigDict
        return {k: fingerprint(obj[k], depth + 1) for k in obj.keys()}
    if isinstance(obj, (list, tuple)):
        return (type(obj), tuple(fingerprint(v, depth + 1) for v in obj))
    if isinstance(obj, dict):
        return {k: fingerprint(v, depth + 1) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not type(obj).__module__.startswith("pyomo."):
        return (type(obj), {k: (id(v), fingerprint(v, depth + 1))
                            for k, v in vars(obj).items()
                            if not k.startswith("_") and k not in COUNTERS})
    return id(obj)


def difference(a, b, path=""):
    """The paths where two fingerprints differ (the first one found)."""
    if type(a) is not type(b):
        return [path or "."]
    if isinstance(a, dict):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                return [f"{path}.{k}"]
            d = difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return []
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], type):
        return difference(a[1], b[1], path)
    if isinstance(a, tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return []
    return [] if a == b else [path or "."]


def spy(cls, changed):
    """A subclass of ``cls`` whose hooks record in ``changed`` the arguments they change."""
    def wrap(name):
        hook = getattr(cls, name)

        def spied(self, *args):
            before = [fingerprint(a) for a in args]
            out = hook(self, *args)
            changed.extend((name, i, where) for i, (a, b) in enumerate(zip(args, before))
                           for where in difference(b, fingerprint(a)))
            return out
        return spied
    return type(f"Spy{cls.__name__}", (cls,), {h: wrap(h) for h in HOOKS})


@pytest.mark.parametrize("approach", APPROACH_NAMES + tuple(USER))
@pytest.mark.parametrize("several", (False, True))
def test_no_hook_changes_its_arguments(approach, several):
    base = USER.get(approach, approach)
    changed = []
    opts = {**OPTS[base], **(TWO_EXPERIMENT_OPTS.get(base, {}) if several else {})}
    P = two_experiments() if several else decay()
    r = po.estimate(P, spy(approach_class(approach), changed), **opts)
    assert r.success, (r.status, r.message)
    assert changed == []


def test_the_spy_sees_a_hook_that_changes_its_argument():
    """The fingerprint is not blind: a solve that records on the built model is seen."""
    cls = approach_class("reduced_space")

    class Recording(cls):
        def solve(self, built, cfg):
            out = super().solve(built, cfg)
            built[1].mult_g = out.mult_g            # the old way: state on the model
            return out

    changed = []
    po.estimate(decay(), spy(Recording, changed), **OPTS["reduced_space"])
    assert ("solve", 0, "[1].mult_g") in changed
    ns = SimpleNamespace(history=[])
    before = fingerprint(ns)
    ns.history.append(1)
    assert fingerprint(ns) != before
