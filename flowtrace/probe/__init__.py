"""Runtime probe: run a target model on real tensors and see which hidden states reach an EAGLE-3 draft.

The static analyzer predicts the aux-hidden-state layout from source; the probe checks that claim
against values. It is the only part of flowtrace that runs model code, so torch stays an optional
dependency (the ``probe`` extra: ``pip install '.[probe]'`` from a checkout, see docs/probe.md): this
package imports nothing heavy at import time.
``flowtrace.probe.cli`` and ``flowtrace.probe.results`` are torch-free; every other module is
imported lazily, from inside the functions that need it.

Public API (names resolve lazily)::

    from flowtrace.probe import probe_capture, probe_draft
    result = probe_capture(factory="my_targets:build", expect=[0, 3, 31])
    print(result.to_json())
"""

from __future__ import annotations

from typing import Any

__all__ = ["probe_capture", "probe_draft", "ProbeError", "SCHEMA"]

SCHEMA = "flowtrace.probe/1"


def __getattr__(name: str) -> Any:
    # Lazy so that ``import flowtrace.probe`` never pulls torch in.
    if name in ("probe_capture", "probe_draft"):
        from flowtrace.probe import api

        return getattr(api, name)
    if name == "ProbeError":
        from flowtrace.probe.errors import ProbeError

        return ProbeError
    raise AttributeError(f"module 'flowtrace.probe' has no attribute {name!r}")
