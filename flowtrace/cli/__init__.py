"""The thin click layer over :mod:`flowtrace.api` (``flowtrace`` console script, ``python -m flowtrace``)."""

from flowtrace.cli.main import main

__all__ = ["main"]
