"""The CI lint runner: rule selection, suppressions, ``[tool.flowtrace]`` config, baselines."""
