"""Typed problem kinds: what a finding says is wrong, as data a program can match.

Rules report one of these (never an English message that a caller would parse); baselines,
SARIF ``properties.problem`` and tests read the kind. Values are stable strings: add members,
never rename one (a renamed value would orphan baselines and dashboards).
"""

from __future__ import annotations

from enum import Enum


class ProblemKind(str, Enum):
    # holders, setters and wrappers (link 3: holder; link 2: transform chain)
    WRAPPER_WITHOUT_SETTER = "wrapper_without_setter"
    TARGET_METHODS_MISSING = "target_methods_missing"
    CAPTURE_WITHOUT_SETTER = "capture_without_setter"
    CAPTURE_FED_BY_OTHER_FAMILY = "capture_fed_by_other_family"
    DELEGATE_CANNOT_CAPTURE = "delegate_cannot_capture"
    INTERFACE_HOLDER_CANNOT_CAPTURE = "interface_holder_cannot_capture"
    FLAG_WITHOUT_CAPTURE = "flag_without_capture"
    # capture sites (link 4)
    SETTER_WITHOUT_CAPTURE_LOOP = "setter_without_capture_loop"
    FORWARD_DROPS_CAPTURE = "forward_drops_capture"
    CAPTURE_SKIPPED_ON_PATH = "capture_skipped_on_path"
    # stream semantics (link 5)
    RESIDUAL_MISSING = "residual_missing"
    MUTATED_AFTER_CAPTURE = "mutated_after_capture"
    NONE_RESIDUAL_AT_EMBEDDING = "none_residual_at_embedding"
    # return path (link 6)
    FLAG_NEVER_SET = "flag_never_set"
    AUX_DROPPED_ON_RETURN = "aux_dropped_on_return"
    # ids and boundaries (links 1, 2, 7)
    TRANSFORM_INCONSISTENT = "transform_inconsistent"
    DEFAULT_BOUNDARIES_SHIFTED = "default_boundaries_shifted"
    EMBEDDING_ID_DROPPED = "embedding_id_dropped"
    EMBEDDING_UNREACHABLE = "embedding_unreachable"
    LAST_LAYER_UNREACHABLE = "last_layer_unreachable"
    UNGUARDED_LAYER_INDEX = "unguarded_layer_index"
    CONFIG_READERS_DISAGREE = "config_readers_disagree"
    # what the analysis could not read or decide
    UNREADABLE_FILE = "unreadable_file"
    REGISTRY_TARGET_MISSING = "registry_target_missing"
    DELEGATE_UNRESOLVED = "delegate_unresolved"
    CAPTURE_POINT_UNKNOWN = "capture_point_unknown"
    UNUSED_SUPPRESSION = "unused_suppression"
