"""The thin click layer over :mod:`flowtrace.api` (``flowtrace`` console script, ``python -m flowtrace``)."""

from flowtrace.cli.main import main


def run() -> None:
    """The ``flowtrace`` console script and ``python -m flowtrace``: one command, then exit.

    Unlike calling :data:`main` in a longer-lived process (tests, a caller's own script), the
    process ends with the command, which lets the index keep its facts out of the cyclic
    collector's way (:mod:`flowtrace.index.lifetime`)."""
    from flowtrace.index.lifetime import one_shot_process

    one_shot_process()
    main()


__all__ = ["main", "run"]
