"""Verified patches for the defects that have a mechanical fix (``flowtrace fix``).

Reading stays on the stdlib ``ast`` (the index); writing uses libcst, whose concrete syntax
tree keeps every comment and all formatting outside the edited node. This package is the only
one that imports libcst, and nothing on the ``scan`` path imports this package, so a scan pays
nothing for it.

A codemod lives in its own module under :mod:`flowtrace.fix.codemods` and is reached from its
rule by a lazy reference (a ``"module:function"`` string), so importing the rules does not
import libcst. A patch is offered only after :mod:`flowtrace.fix.verify` re-ran the analysis
on the patched tree: the finding gone, no new finding, and the trace serving the boundaries
the fix promises; otherwise it is withheld with the reason.
"""
