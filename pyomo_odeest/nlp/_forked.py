"""One call in a forked child process, with a hard deadline.

Some work cannot be stopped from inside the process that runs it: one MUMPS
factorization of a large KKT system, a stiff simulation in compiled code, a
model's set-up.  :func:`run_forked` runs ``fn()`` in a child forked from this
process (so it sees everything this process has built, with nothing pickled on
the way in), sends its return value back through a pipe, and kills the child
(``SIGKILL``) if it is still running at ``deadline``.  An interrupt of the waiting
process (``KeyboardInterrupt``) kills the child too before it propagates.  Used by
:func:`~pyomo_odeest.nlp.solve_with_ipopt` (the hard limit of ``max_wall_time``)
and by the runner's isolated tasks.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass

__all__ = ["CAN_FORK", "Forked", "run_forked", "dumps"]

#: forking is used only where it is the platform's default and well tested
CAN_FORK = hasattr(os, "fork") and sys.platform.startswith("linux")


def dumps(obj) -> bytes:
    """``obj`` pickled by reference where it can be (as Dask sends results: the classes
    sympy creates at run time do not survive cloudpickle's copy by value), else by
    cloudpickle."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:                     # noqa: BLE001 - lambdas, local classes
        try:
            import cloudpickle                   # with the [dask] extra
        except ImportError:
            raise err from None
        return cloudpickle.dumps(obj)


@dataclass
class Forked:
    """What :func:`run_forked` saw: exactly one of ``value`` (with ``returned``),
    ``timed_out``, ``died`` (how the child ended without sending anything) or
    ``unsendable`` (the value could not be pickled or unpickled) describes it."""
    returned: bool = False
    value: object = None
    timed_out: bool = False
    died: str | None = None
    unsendable: str | None = None


def _read_until(fd, deadline, messages=None, on_message=None):
    """The bytes written to the pipe ``fd`` until it closes; None at ``deadline``
    (``time.monotonic()``; None: no limit).  Meanwhile the records written to the
    pipe ``messages`` (8-byte length, then a pickle) go to ``on_message``, up to
    its close too."""
    import select
    data, pending, done = bytearray(), bytearray(), False
    watched = [fd] if messages is None else [fd, messages]
    while watched:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return None
        ready = select.select(watched, [], [], wait)[0]
        if messages in ready:
            chunk = os.read(messages, 1 << 16)
            if not chunk:
                watched.remove(messages)
            pending += chunk
            while len(pending) >= 8:
                size = int.from_bytes(pending[:8], "little")
                if len(pending) < 8 + size:
                    break
                record = pickle.loads(bytes(pending[8:8 + size]))
                del pending[:8 + size]
                on_message(record)
        if fd in ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                watched.remove(fd)
                done = True
            data += chunk
    return bytes(data) if done else None


def _signal_name(number) -> str:
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def _stop_child(pid):
    """Kill the forked process ``pid`` and reap it (it is gone when this returns)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _flush():
    """Python's and C's output buffers written out (before a fork, so that neither
    process writes the other's pending text; before the child exits, so that the
    text of compiled code in it, such as Ipopt's log, is not lost by ``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):           # pragma: no cover - no C library to ask
        pass


def run_forked(fn, deadline=None, on_message=None) -> Forked:
    """``fn()`` in a forked child; its return value comes back pickled.

    ``deadline``: ``time.monotonic()`` value at which a child still running is
    killed (None: no limit).  An exception raised by ``fn`` is the child's to turn
    into a value (this function sends back only what ``fn`` returns); one that
    escapes ends the child without a value (``died``).  ``on_message``: called here
    with every object the child passes to ``send``; ``fn`` is then called as
    ``fn(send)`` (progress lines printed by this process, whatever its standard
    streams are).  Needs :data:`CAN_FORK`.
    """
    if not CAN_FORK:
        raise RuntimeError("run_forked needs os.fork on Linux")
    mr, mw = os.pipe() if on_message is not None else (None, None)
    r, w = os.pipe()
    _flush()             # a buffered line would otherwise be written by both processes
    # SIGINT is held back while forking: an interrupt that arrives then would be raised,
    # and swallowed, inside the at-fork hooks (logging's), and the child would live on
    held = hasattr(signal, "pthread_sigmask")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if held else None
    try:
        pid = os.fork()
    except BaseException:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for end in (r, w, mr, mw):
            if end is not None:
                os.close(end)
        raise
    if pid == 0:                                 # the child: run, send, exit
        code = 1
        try:
            if held:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(r)
            if mw is None:
                value = fn()
            else:
                os.close(mr)

                def send(obj):
                    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
                    view = memoryview(len(body).to_bytes(8, "little") + body)
                    while view:
                        view = view[os.write(mw, view):]
                value = fn(send)
            try:
                payload = b"v" + dumps(value)
            except BaseException as err:         # noqa: BLE001 - a value that does not pickle
                payload = b"u" + f"{type(err).__name__}: {err}".encode(errors="replace")
            with os.fdopen(w, "wb") as f:
                f.write(payload)
            code = 0
        finally:
            _flush()
            os._exit(code)
    write_end = w
    try:
        if held:                                 # a held-back interrupt is raised here
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        write_end = None
        os.close(w)
        if mw is not None:
            os.close(mw)
            mw = None
        data = _read_until(r, deadline, mr, on_message)
    except BaseException:                        # interrupted: the child must not live on
        _stop_child(pid)
        for end in (write_end, mw):
            if end is not None:
                os.close(end)
        raise
    finally:
        os.close(r)
        if mr is not None:
            os.close(mr)
    if data is None:
        _stop_child(pid)
        return Forked(timed_out=True)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and data:
        if data[:1] == b"u":
            return Forked(unsendable=data[1:].decode(errors="replace"))
        try:
            return Forked(returned=True, value=pickle.loads(data[1:]))
        except Exception as err:                 # noqa: BLE001 - sent, but not readable here
            return Forked(unsendable=f"{type(err).__name__}: {err}")
    how = (_signal_name(os.WTERMSIG(status)) if os.WIFSIGNALED(status)
           else f"exit code {os.WEXITSTATUS(status)}")
    return Forked(died=how)
