"""The thin click layer over :mod:`flowtrace.api` (``flowtrace`` console script, ``python -m flowtrace``)."""

import atexit
import os
import sys
from typing import NoReturn

from flowtrace.cli.main import main


def run() -> NoReturn:
    """The ``flowtrace`` console script and ``python -m flowtrace``: one command, then exit.

    Unlike calling :data:`main` in a longer-lived process (tests, a caller's own script), the
    process ends with the command, which lets the index keep its facts out of the cyclic
    collector's way (:mod:`flowtrace.index.lifetime`) and lets the process end without freeing
    them one by one (:func:`end_process`)."""
    from flowtrace.index.lifetime import one_shot_process

    one_shot_process()
    try:
        main()
    except SystemExit as exc:
        end_process(exc.code)
    end_process(0)  # pragma: no cover - the group always exits through SystemExit


def end_process(code: object) -> NoReturn:
    """Exit with ``code`` as ``sys.exit`` would, without the interpreter's teardown: the atexit
    handlers run and the standard streams are flushed, then ``os._exit``. A cold scan's heap is
    hundreds of thousands of objects that teardown would free one by one, a few hundredths of a
    second of wall time for nothing (mypy ends the same way, for the same reason). A closed pipe
    at the last flush exits 2, as a broken pipe during a command does."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message to stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a reader that went away, or a stream closed under us
        status = status or 2
    os._exit(status)


__all__ = ["end_process", "main", "run"]
