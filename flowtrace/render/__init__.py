"""Renderers: one findings/scan model, many output formats."""
