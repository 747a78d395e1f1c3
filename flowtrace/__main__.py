"""``python -m flowtrace`` is the same as the ``flowtrace`` console script."""

from flowtrace.cli import main

if __name__ == "__main__":
    main()
