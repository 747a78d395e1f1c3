"""Analyses over the indexed facts: resolution into capture chains, the graph, the id evaluator, trace, compat."""
