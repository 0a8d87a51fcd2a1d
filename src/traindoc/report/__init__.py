"""Renderers: the same Report shown as terminal text, JSON, HTML or SARIF."""
