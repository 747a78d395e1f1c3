"""Sources: discovering the files of a tree and fetching ``pypi:`` releases (never executed)."""
