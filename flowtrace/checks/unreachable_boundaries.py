"""Boundaries a draft may ask for that this engine can never capture (FT009, FT010, FT011)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterator

from flowtrace.model import facts as F
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions
from flowtrace.model.facts import ProblemKind
from flowtrace.analysis.runner_calls import runner_verdicts
from flowtrace.analysis.trace import trace_row

PROBE_LAYERS = 32  # any realistic layer count works: reachability does not depend on it


def _groups(result):
    """Registered rows with a decidable capture path, grouped by (setter, site) so a base class
    shared by many registered subclasses is reported once. A row the runner's model check
    refuses raises for every id before its setter runs: no boundary of it is this family's
    question (its trace says where it raises)."""
    groups: dict[tuple, list] = {}
    for row in result.rows:
        chain = _setter_chain(row)
        if not row.registered or chain is None or chain.site is None or chain.site.point == F.UNKNOWN:
            continue
        if any(v.raises for v in runner_verdicts(result.project, row.qualname)):
            continue
        groups.setdefault((chain.transforms[0].location, chain.site.location), []).append(row)
    return groups


def _setter_chain(row):
    """The row's chain when its ids reach a setter (the rules below trace setter chains)."""
    chain = row.chain
    return chain if chain is not None and chain.source.kind == F.SourceKind.SETTER and chain.transforms else None


def _reaches(result, row, ids, boundary) -> bool:
    traced = trace_row(result.project, row, ids, PROBE_LAYERS)
    return traced.boundaries is not None and boundary in traced.boundaries


def _names(rows) -> str:
    names = sorted(r.name for r in rows)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _boundaries(result, row, ids):
    """The boundaries ``ids`` reach on a probe layer count; None when the trace cannot decide."""
    return trace_row(result.project, row, ids, PROBE_LAYERS).boundaries


def _location(text) -> F.Location | None:
    """A trace's ``raises_at`` ("file:line" or a Location) as a Location."""
    if text is None or isinstance(text, F.Location):
        return text
    file, _, line = str(text).rpartition(":")
    return F.Location(file, int(line)) if file and line.isdigit() else None


def _majority_transform(result) -> str | None:
    chains = (_setter_chain(r) for r in result.rows if r.registered)
    counts = Counter(c.effective_transform for c in chains if c is not None and c.site is not None)
    return counts.most_common(1)[0][0] if counts else None


class UnreachableEmbedding(Rule):
    code = "FT009"
    name = "unreachable-embedding"
    severity = "warning"
    kind = ProblemKind.EMBEDDING_ID_DROPPED
    summary = "The embedding output (boundary 0) cannot be captured, or not with the id this engine's drafts use for it."
    rationale = (
        "Each engine has one convention for the id that names the embedding (the profile's "
        "embedding_id: -1 where ids mean 'output of layer i', 0 where ids are boundaries). A setter "
        "whose transform drops that id, or a loop that records nothing before layer 0, gives such a "
        "draft one state fewer, or a shifted one. Classes whose trace cannot be decided are left to FT017."
    )
    fix = "Map the engine's embedding id to the index the loop records before layer 0, as the engine's other setters do."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
""", 'SGLang: -1 + 1 = 0, recorded before layer 0'
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = list(layer_ids)

EntryClass = ExForCausalLM
""", 'SGLang: -1 is never a loop index'
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        # One finding per setter and kind of problem: an interface setter shared by dozens of
        # models is one defect, not one per model file.
        cc = conventions(result)
        embedding = cc.embedding_id if cc.embedding_id is not None else -1
        merged: dict[tuple, list] = {}
        for (setter_loc, _), rows in _groups(result).items():
            row = rows[0]
            if row.chain.has(ProblemKind.INDEX0_RAISES):
                continue  # recording index 0 raises: FT022 reports that, with the line
            traced = trace_row(result.project, row, [embedding], PROBE_LAYERS)
            if traced.outcome == F.Outcome.RAISES:  # e.g. a fixed-slot packer fed one state fewer
                entry = merged.setdefault((str(setter_loc), ProblemKind.EMBEDDING_RAISES), [setter_loc, row, [], traced])
                entry[2].extend(rows)
                continue
            reached = traced.boundaries
            if reached is None or 0 in reached:
                continue
            other = next((i for i in (-1, 0) if i != embedding and 0 in (_boundaries(result, row, [i]) or ())), None)
            if other is None and row.chain.site.embedding_capturable is not False:
                continue  # the site records before layer 0; the setter's mapping is FT007's question
            kind = ProblemKind.EMBEDDING_ID_DROPPED if other is not None else ProblemKind.EMBEDDING_UNREACHABLE
            entry = merged.setdefault((str(setter_loc), kind), [setter_loc, row, [], other])
            entry[2].extend(rows)
        majority = _majority_transform(result)
        for (_, kind), (setter_loc, row, rows, other) in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
            c = row.chain
            site = c.site.location if c.site else None
            if kind is ProblemKind.EMBEDDING_RAISES:
                message = f"{_names(rows)}: asking for the embedding (id {embedding}) raises at {other.raises_at}: {other.reason}"
                fix = "Make the capture accept the engine's embedding id (or size the collector by the states it really records)."
                raising: tuple[tuple[str, F.Location | None], ...] = (("setter", setter_loc), ("raises", _location(other.raises_at)), ("capture site", site))
                yield self.finding(setter_loc, message, row.qualname, f"embedding:{kind.value}:{c.effective_transform}", steps=raising, kind=kind, fix=fix)
                continue
            if kind is ProblemKind.EMBEDDING_ID_DROPPED:
                message = (
                    f"{_names(rows)}: id {embedding} (the embedding in this engine's draft configs) reaches no boundary through "
                    f"{c.transforms[0].method}'s {c.effective_transform} transform ({setter_loc}); only id {other} reaches b=0"
                )
                fix = f"Map id {embedding} to the index recorded before layer 0 ({site}), as the engine's {majority} setters do."
            else:
                message = f"{_names(rows)}: no id reaches the embedding (b=0): the capture at {site} is {c.site.point} and nothing is recorded before layer 0"
                fix = f"Record the stream before the first layer when index 0 is requested (at {site}), so id {embedding} reaches b=0."
            flow = (("setter", setter_loc), ("capture site", site))
            yield self.finding(setter_loc, message, row.qualname, f"embedding:{kind.value}:{c.effective_transform}", steps=flow, kind=kind, fix=fix)


class UnreachableLastLayer(Rule):
    code = "FT010"
    name = "unreachable-last-layer"
    severity = "info"
    summary = "The last layer's output (boundary L, before the final norm) cannot be captured."
    rationale = (
        "A loop that records each layer's input sees boundaries 0..L-1 only. A draft trained on the last "
        "layer's output (id L-1 as 'output of layer i', or HF index L-1+1) is served nothing for that slot."
    )
    kind = ProblemKind.LAST_LAYER_UNREACHABLE
    fix = "Record the stream after the loop when the last index is requested (as some engines do with `if self.end_layer in ...`)."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if self.end_layer in self.layers_to_capture:
            aux_hidden_states.append(hidden_states + residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
""", 'records b = L after the loop'
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
""", "records each layer's input only"
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        L = PROBE_LAYERS
        for (setter_loc, site_loc), rows in sorted(_groups(result).items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            row = rows[0]
            if any(_reaches(result, row, [i], L) for i in (L - 1, L)):
                continue
            yield self.finding(
                site_loc,
                f"{_names(rows)}: the last layer's output (b=L) is never captured ({row.chain.site.note})",
                row.qualname,
                f"last:{row.chain.site.point}",
                steps=(("setter", setter_loc), ("capture site", site_loc)),
            )


_INDEXING = re.compile(r"self\.(\w+)\[\s*(\w+)\s*\]")


class UnguardedLayerIndex(Rule):
    code = "FT011"
    name = "unguarded-layer-index"
    severity = "warning"
    summary = "A setter indexes the layer list with config ids without a range check."
    rationale = (
        "Draft ids come from a config file. Indexing self.layers with them raises IndexError for an "
        "out-of-range id and silently picks the wrong layer for a negative one (-1 is the last layer)."
    )
    kind = ProblemKind.UNGUARDED_LAYER_INDEX
    fix = "Check 0 <= id < len(self.layers) before indexing, and reject or map negative ids explicitly."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def set_eagle3_layers_to_capture(self, layer_ids):
        for layer_id in layer_ids:
            if 0 <= layer_id < len(self.layers):
                setattr(self.layers[layer_id], "_is_layer_to_capture", True)
"""
        ),
    )
    invalid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def set_eagle3_layers_to_capture(self, layer_ids):
        for layer_id in layer_ids:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        layers = result.project.conv.layers_attributes
        for ff in result.files:
            for s in ff.setters:
                for m in _INDEXING.finditer(s.source):
                    if m.group(1) not in layers or m.group(2).isdigit():
                        continue
                    if "len(self." in s.source or "range(" in s.source:
                        continue
                    yield self.finding(
                        s.location,
                        f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} indexes self.{m.group(1)}[{m.group(2)}] with draft-config ids and no range check",
                        f"{s.class_qualname}.{s.method}",
                        m.group(0),
                    )
                    break
