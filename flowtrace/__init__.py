"""flowtrace: trace hidden-state data flow (EAGLE-3 aux hidden states) through LLM inference engines.

The pipeline reads top to bottom in the package listing: ``index`` (files -> facts),
``facts`` (the frozen records every stage passes on), ``resolve`` (facts -> model matrix),
``graph`` (facts -> networkx graph), ``checks`` / ``trace`` / ``compat`` (graph -> answers),
``render`` (answers -> text, json, sarif, github, html). ``probe`` sits beside it and is the
only part that runs model code.
"""

__version__ = "0.1.0"
# The name pip knows this project by (pyproject.toml [project] name); `flowtrace` on the package
# index is another project, so every install hint and --version names this one.
DISTRIBUTION = "flowtrace-llm"
