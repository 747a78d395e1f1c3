"""How long this process keeps what the index builds: until it exits, or not known.

The console script answers one command and exits; a library caller (a test, a user's script)
may index many trees in one process. Only the first may hand the index's facts to the
permanent GC generation, so this is a declaration the console script makes, not a default.
"""

from __future__ import annotations

import gc

_one_shot = False


def one_shot_process() -> None:
    """Declare that this process answers one command and then exits (the console script does)."""
    global _one_shot
    _one_shot = True


def keep_until_exit() -> None:
    """Called by the index once its facts are built: in a one-shot process, move everything
    alive to the permanent GC generation (``gc.freeze``), so the collections that the later
    stages' allocations set off stop walking the facts again and again (about a tenth of the
    wall time of a cold scan). Never thawed: the collection at interpreter exit would walk
    them all once more. Elsewhere nothing happens, so a process that indexes repeatedly holds
    nothing it drops back from the cyclic collector."""
    if _one_shot:
        gc.freeze()
