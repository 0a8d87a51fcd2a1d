"""traindoc's lint face: find training failures in the source, without running it.

``lint_paths`` reads Python files and directories, runs every lint rule (``rules/``, one per
failure id) over each file's AST and returns catalog findings with their locations. Nothing
here imports torch.
"""

from __future__ import annotations

from traindoc.lint.engine import LintError, LintFinding, LintResult, UsageError, lint_paths, lint_source
from traindoc.lint.rules import rule_docs

__all__ = ["LintError", "LintFinding", "LintResult", "UsageError", "lint_paths", "lint_source", "rule_docs"]
