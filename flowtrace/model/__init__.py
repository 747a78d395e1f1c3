"""Facts: the frozen, slotted dataclasses and enums every stage passes on, and the safe evaluator
(``safe_eval``) of the arithmetic they carry: it depends on nothing; profiles and analyses both use it."""
