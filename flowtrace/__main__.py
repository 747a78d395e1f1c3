"""``python -m flowtrace`` is the same as the ``flowtrace`` console script."""

from flowtrace.cli import run

if __name__ == "__main__":
    run()
