"""One module per codemod; each exposes ``plan(result, finding, sources) -> Proposal``.

A rule reaches its codemod by a lazy ``"module:function"`` reference (:mod:`flowtrace.fix.registry`),
so importing the rules never imports libcst.
"""
