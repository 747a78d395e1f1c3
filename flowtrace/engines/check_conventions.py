"""What the checks need to know about an engine: the profile's optional ``[checks]`` table.

The keys are declared, read and validated with every other profile key in
:class:`flowtrace.engines.profiles.Profile` (same loader, same regular-expression guard, read
once with the profile); this module combines the selected profiles' values for the rules. Every
key is optional: a profile written before this table existed keeps working with the neutral
defaults below.

Keys (all optional):

- ``target_methods``: every method the engine calls on an EAGLE-3 target model class (a
  wrapper that lacks one cannot serve a draft).
- ``draft_class_patterns``: regular expressions on class names of draft heads (MTP, NextN,
  EAGLE drafts): they are served *as* drafts, never as EAGLE-3 targets.
- ``draft_projection_attributes``: attributes a draft head assigns for its projection of the
  embedding and the target's hidden state (``eh_proj`` of an MTP head), beside ``[draft]
  fc_attribute``; with a name matching ``draft_class_patterns`` they make the class a draft
  (:mod:`flowtrace.analysis.categories`).
- ``non_target_patterns``: regular expressions on class names or registered architectures of
  models that do not decode autoregressively (block diffusion): never EAGLE-3 targets.
- ``speculative_entry_points``: the methods of a target that run while a draft is served;
  a forward path reached from none of them never feeds the draft.
- ``capture_families``: other capture families that write the same capture attribute,
  ``[{ name = "DFlash", setters = ["set_dflash_layers_to_capture"] }]``.
- ``embedding_id``: the draft-config id that names the embedding output (b = 0) in this
  engine's convention (-1 where ids mean "output of layer i", 0 where ids are boundaries).
- ``interface_holder_path``: the attributes the engine's interface setter walks from the
  model to the holder, each optional (``["language_model", "model"]``).
- ``startup_refusal``: what the engine says when it refuses a model for EAGLE-3 at start-up
  (its error message, and where it raises); findings whose consequence is a refusal quote it.
- ``startup_forward``: where the engine runs the target's forward while it starts (a profile
  run, a CUDA graph capture) with the aux capture on and unpacks what it returns: a forward
  that returns one value where ``(hidden, aux)`` is unpacked fails *there*, at start-up, with
  an error that does not say why (``crash_startup``), not on a request.
  Where the engine's serving plan is known (:mod:`flowtrace.analysis.serving`), it decides
  whether the runner sets the layers before its start-up graph capture.
- ``platform_builds``: distributions built for one platform, as ``"<dist-info Name>:
  <platform test that holds there>"`` (``"eng-cpu: platform.is_cpu()"``): in such a
  tree the other ``is_*()`` tests of that object are false, so a per-platform copy the
  package imports only under one of them runs nowhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Iterable

from flowtrace.engines.methods import default_of, merge_methods
from flowtrace.engines.profiles import CaptureFamily

if TYPE_CHECKING:
    from flowtrace.engines.profiles import Profile

__all__ = ["CaptureFamily", "CheckConventions", "check_conventions"]


@dataclass(frozen=True, slots=True)
class CheckConventions:
    """The ``[checks]`` keys of the selected profiles, combined (field names are the keys)."""

    target_methods: tuple[str, ...] = ()
    draft_class_patterns: tuple[str, ...] = ()
    draft_projection_attributes: tuple[str, ...] = ()
    non_target_patterns: tuple[str, ...] = ()
    speculative_entry_points: tuple[str, ...] = ()
    capture_families: tuple[CaptureFamily, ...] = ()
    embedding_id: int | None = None
    interface_holder_path: tuple[str, ...] = ()
    startup_refusal: str | None = None
    startup_forward: str | None = None
    platform_builds: tuple[str, ...] = ()

    def is_draft_class(self, name: str) -> bool:
        return any(p.search(name) for p in _compiled(self.draft_class_patterns))

    def is_non_target(self, names: Iterable[str]) -> bool:
        return any(p.search(n) for p in _compiled(self.non_target_patterns) for n in names)

    def family_of(self, method: str) -> CaptureFamily | None:
        return next((f for f in self.capture_families if method in f.setters), None)


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    """The patterns compiled once: every rule asks about every row (``re.search`` looks each
    pattern up in its cache again on each of tens of thousands of calls)."""
    return tuple(re.compile(p) for p in patterns)


def check_conventions(profiles: Iterable[Profile], method: str | None = None) -> CheckConventions:
    """The union of the selected profiles' ``[checks]`` values, in profile order (the embedding
    id only when every profile that names one names the same). ``method``: the speculative
    method the rules check (None: the default one); its own values (``embedding_id``,
    ``startup_refusal``, ``target_methods``) replace the profile's, and the other methods'
    setters are its other capture families."""
    profiles = list(profiles)
    if not profiles:
        return CheckConventions()
    general = _general(profiles)
    return _for_method(general, profiles, method)


def _for_method(general: CheckConventions, profiles: list[Profile], method: str | None) -> CheckConventions:
    served = merge_methods(p.methods_served for p in profiles)
    if not served:
        return general
    chosen = default_of(served) if method is None else next((m for m in served if m.name == method), default_of(served))
    own = set(chosen.setters)
    families = [f for f in general.capture_families if not own.intersection(f.setters)]
    known = {s for f in families for s in f.setters}
    for other in served:
        setters = tuple(s for s in other.setters if s not in own and s not in known)
        if other.name != chosen.name and setters:
            families.append(CaptureFamily(other.title, setters))
            known.update(setters)
    changes: dict[str, object] = {"capture_families": tuple(families)}
    if chosen.none_embedding:
        changes["embedding_id"] = None
    elif chosen.embedding_id is not None:
        changes["embedding_id"] = chosen.embedding_id
    if not chosen.default:
        changes["startup_refusal"] = chosen.startup_refusal or None
        changes["target_methods"] = chosen.target_methods
    elif chosen.target_methods:
        changes["target_methods"] = tuple(dict.fromkeys((*general.target_methods, *chosen.target_methods)))
    return replace(general, **changes)  # type: ignore[arg-type]


def _general(profiles: list[Profile]) -> CheckConventions:
    values: dict[str, object] = {}
    for f in fields(CheckConventions):
        if f.name not in ("embedding_id", "startup_refusal", "startup_forward"):
            values[f.name] = tuple(dict.fromkeys(x for p in profiles for x in getattr(p, f.name)))
    ids = [p.embedding_id for p in profiles if p.embedding_id is not None]
    # Quoted only when every selected profile says the same: a fork scanned with every profile
    # merged must not quote another engine's message.
    refusals = {p.startup_refusal for p in profiles}
    refusal = refusals.pop() if len(refusals) == 1 else ""
    forwards = {p.startup_forward for p in profiles}
    forward = forwards.pop() if len(forwards) == 1 else ""
    return CheckConventions(
        embedding_id=ids[0] if len(set(ids)) == 1 else None,
        startup_refusal=refusal or None,
        startup_forward=forward or None,
        **values,  # type: ignore[arg-type]
    )
