"""Generated code kept on disk between runs, keyed by what it is generated from.

The set-up of a model with many conditions (a PEtab problem) spends its time
generating code from sympy: derivatives, common subexpressions, printing.  The
store keeps such code in files of the user's cache directory (:func:`cache_dir`),
one file per entry, named by the SHA-256 of its key: the expressions it was
generated from (``sympy.srepr``, which names every symbol with its assumptions),
the versions of Python and sympy, and the text of the modules that generate it.  A new version or other expressions give another name, and the old
entry is never read again.

A file holds its key and a checksum of its content.  One that does not match (a
truncated or edited file, a file of another format, another key of the same
name) is not used: its entry is generated again and the file replaced
(:func:`stored`).  A write goes to a temporary file renamed into place, so that
a process never reads another's partial entry.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile

import sympy

__all__ = ["cache_dir", "stored", "CACHE_ENV", "STORE_COUNTS"]

#: environment variable naming the cache directory (default: ``$XDG_CACHE_HOME/pyomo_odeest``
#: or ``~/.cache/pyomo_odeest``)
CACHE_ENV = "PYOMO_ODEEST_CACHE"
#: entries of this process: ``loaded`` from disk, ``built`` (generated and written),
#: ``rejected`` (a file that did not match its key or checksum, replaced)
STORE_COUNTS = {"loaded": 0, "built": 0, "rejected": 0}
_FORMAT = 1
#: the modules whose text generates the stored code (a change makes new keys)
_GENERATORS = ("_lambdify.py", "_vectorfn.py", "_store.py")


def cache_dir(kind, env=None) -> str:
    """A writable directory ``<cache>/<kind>`` for files kept between runs: ``<cache>`` is
    ``$PYOMO_ODEEST_CACHE``, else ``$XDG_CACHE_HOME/pyomo_odeest``, else
    ``~/.cache/pyomo_odeest``; ``env`` names a variable that, when set, gives the
    directory itself; the system's temporary directory when none is writable."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "pyomo_odeest")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    own = os.environ.get(env) if env else None
    candidates = ([own] if own else []) + [
        os.path.join(base, kind),
        os.path.join(tempfile.gettempdir(), f"pyomo_odeest_{kind}_{uid}")]
    for d in candidates:
        try:
            os.makedirs(d, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise OSError(f"no writable directory for the {kind} cache; set "
                  f"{env or CACHE_ENV}")


@functools.lru_cache(maxsize=None)
def _fingerprint() -> str:
    """The versions and the generating modules' text that every key includes (the text,
    not the package's version number, which does not change with every edit)."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in _GENERATORS:
        with open(os.path.join(here, name), "rb") as fh:
            h.update(fh.read())
    return (f"format {_FORMAT}; python {platform.python_version()}; sympy {sympy.__version__}; "
            f"generators {h.hexdigest()}")


def _checksum(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def stored(kind, key_text, build):
    """The entry of ``key_text`` (a string that determines it) in the store ``kind``:
    read from its file, or ``build()`` (a JSON-serializable value) written there.

    A file whose key or checksum does not match is not used (``STORE_COUNTS['rejected']``)
    and is replaced by a new entry; a directory that cannot be written leaves the
    entry built and unsaved."""
    key = f"{_fingerprint()}\n{kind}\n{key_text}"
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    path = os.path.join(cache_dir("generated"), f"{kind}_{name}.json")
    value = _read(path, key)
    if value is not None:
        STORE_COUNTS["loaded"] += 1
        return value
    value = build()
    STORE_COUNTS["built"] += 1
    _write(path, key, value)
    return value


def _read(path, key):
    """The value in ``path`` if the file holds ``key`` and its checksum holds, else None."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        STORE_COUNTS["rejected"] += 1
        return None
    ok = (isinstance(record, dict) and record.get("key") == key
          and isinstance(record.get("content"), str)
          and record.get("checksum") == _checksum(record["content"]))
    if not ok:
        STORE_COUNTS["rejected"] += 1
        return None
    return json.loads(record["content"])


def _write(path, key, value):
    content = json.dumps(value)
    record = json.dumps({"key": key, "checksum": _checksum(content), "content": content})
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(record)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
