"""``python -m traindoc.lint PATH...``: run lint without the main CLI (local use and tests)."""

from __future__ import annotations

import argparse
import sys

from traindoc.lint.cli import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="traindoc lint", description="Lint PyTorch training scripts.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
