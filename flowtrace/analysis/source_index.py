"""The setter-less source facts of one scan, by class: what :mod:`flowtrace.analysis.config_capture` reads.

Config-attribute, build-context and hook engines link an id source, a config builder, a capture
dict or a hook call per model class; each of those facts is looked up by class (or by flag, for
the layer forwards) many times per scan, so they are grouped once, here. The index belongs to
the scan's :class:`~flowtrace.analysis.class_lookup.ClassLookup` (its ``sources``), which builds
it on first use: a setter engine's scan never pays for it.
"""

from __future__ import annotations

from flowtrace.model import facts as F


class SourceIndex:
    """The SourceFacts of one scan, by class (builders, feeds and defaults in file order)."""

    def __init__(self, files: tuple[F.FileFacts, ...]) -> None:
        self.id_sources: dict[str, list[F.IdSourceFact]] = {}
        self.builders: list[F.BuilderFact] = []
        self.feeds: list[F.GatedWrite] = []
        self.dicts: dict[str, list[F.DictCaptureFact]] = {}
        self.flags: dict[str, list[F.FlagUseFact]] = {}
        self.hooks: dict[str, list[F.HookCallFact]] = {}
        self.defaults: list[F.MetadataDefaultFact] = []
        for ff in files:
            if ff.sources is not None:
                self._add(ff.sources)

    def _add(self, s: F.SourceFacts) -> None:
        for x in s.id_sources:
            self.id_sources.setdefault(x.class_qualname, []).append(x)
        self.builders += s.builders
        self.feeds += s.feeds
        for d in s.dict_captures:
            self.dicts.setdefault(d.class_qualname, []).append(d)
        for u in s.flag_uses:
            self.flags.setdefault(u.parameter, []).append(u)
        for h in s.hook_calls:
            self.hooks.setdefault(h.class_qualname, []).append(h)
        self.defaults += s.metadata_defaults


__all__ = ["SourceIndex"]
