"""Facts: the frozen, slotted dataclasses and enums every stage passes on (no behaviour)."""
