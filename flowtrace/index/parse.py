"""Parse one file into facts, safely: limits, encodings, and every failure as a diagnostic.

This is the function the process pool runs. It takes bytes, never imports or executes them,
and always returns a :class:`FileFacts` (possibly empty with a diagnostic) instead of raising.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

import libcst as cst

from flowtrace import facts as F
from flowtrace.index.syntax import module_name
from flowtrace.profiles import Conventions

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT_S = 20.0


class _Timeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float):
    """Abandon a parse that runs too long (SIGALRM; only possible on the main thread)."""
    usable = seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):  # noqa: ARG001
        raise _Timeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def matters(data: bytes, markers: tuple[bytes, ...]) -> bool:
    """The byte prefilter: a file that names none of the profile's markers cannot matter."""
    return any(m in data for m in markers)


def decode(data: bytes) -> str:
    """Source text for line-based work (suppressions), honouring a BOM or a coding cookie."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding, errors="replace")
    except (SyntaxError, LookupError):
        return data.decode("utf-8", errors="replace")


def analyze_bytes(
    path: str,
    data: bytes,
    conv: Conventions,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> F.FileFacts:
    from flowtrace.index.visitors import FileAnalyzer

    modname = module_name(path)
    if len(data) > max_bytes:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, f"file is {len(data)} bytes, over the {max_bytes}-byte limit; not parsed", "too-large"),))
    if b"\x00" in data:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, "contains NUL bytes (binary?); not parsed", "parse-error"),))
    old_limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old_limit, 6000))
        with _time_limit(timeout_s):
            try:
                module = cst.parse_module(data)
            except cst.ParserSyntaxError as exc:
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
                return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, exc.raw_line or 0, f"syntax error: {message}", "parse-error"),))
            source = decode(data)
            return FileAnalyzer(path, source, module, conv).facts()
    except _Timeout:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, f"parse took over {timeout_s:g}s; abandoned", "timeout"),))
    except RecursionError:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, "nesting too deep to parse (recursion limit)", "parse-error"),))
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, f"cannot decode: {exc}", "parse-error"),))
    except MemoryError:
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, "out of memory while parsing", "parse-error"),))
    except Exception as exc:  # noqa: BLE001 - one file's analyser bug must not end the scan
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, 0, f"internal error while analysing ({type(exc).__name__}: {exc})", "internal"),))
    finally:
        sys.setrecursionlimit(old_limit)
