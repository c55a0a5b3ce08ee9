"""Returning the C allocator's free pages to the system around large NLPs."""
from __future__ import annotations

import ctypes

__all__ = ["RELEASE_MEMORY_MIN_VARIABLES", "release_free_memory"]

#: an NLP with at least this many variables has the C library's free memory returned to
#: the system after its evaluator's set-up and around its Ipopt solve
#: (:func:`release_free_memory`)
RELEASE_MEMORY_MIN_VARIABLES = 10_000


def _libc_trim():
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


_MALLOC_TRIM = _libc_trim()


def release_free_memory():
    """Return the pages the C allocator holds free to the system (glibc's
    ``malloc_trim(0)``; nothing elsewhere).  The arrays of a set-up (the evaluator's
    structure, the scaling's Jacobian, the start's multipliers) are freed before Ipopt
    starts, but glibc keeps arrays below its adaptive mmap threshold (up to 32 MB) in its
    heap, and Ipopt's and MUMPS's allocations then grow the process on top of those free
    pages; returned, they are reused page by page.  Called after an evaluator's set-up,
    before Ipopt starts and after it has finished (what Ipopt and MUMPS freed, before the
    post-solve analyses allocate), for NLPs of at least :data:`RELEASE_MEMORY_MIN_VARIABLES`
    variables (docs/performance.md, "Memory"); it takes milliseconds.  True where it
    ran."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
