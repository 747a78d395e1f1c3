"""Errors the probe raises for user mistakes.

A user mistake (a bad ``--factory``, a missing checkpoint key, an out-of-range boundary) must read
as one line that names the file or key and says how to fix it; the CLI turns :class:`ProbeError`
into a click error with exit code 2 instead of showing a traceback. Bugs in the probe itself stay
ordinary exceptions so that they do show a traceback.
"""

from __future__ import annotations

from types import ModuleType


# How to get the probe's extra today: flowtrace-llm is not on the package index yet, so from a
# checkout, or pinned to a commit of the repository (docs/probe.md, "Install").
INSTALL_HINT = (
    "install the probe extra: from a flowtrace checkout pip install '.[probe]', else "
    "pip install 'flowtrace-llm[probe] @ git+https://github.com/OWNER/flowtrace@COMMIT' (docs/probe.md)"
)


class ProbeError(Exception):
    """A user-facing problem: the message is one line that says what is wrong and how to fix it."""


class MissingDependency(ProbeError):
    """An optional package (torch, safetensors, transformers) is needed for this command."""


def require_torch() -> ModuleType:
    """Import torch or fail with the install hint; the probe is an optional extra."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise MissingDependency(f"the probe needs PyTorch, which is not importable ({exc}); {INSTALL_HINT}") from None
    return torch
