"""Precision and recall of `traindoc lint` on real training code, read where it lives.

The manifest (benchmarks/lint_real_manifest.toml) lists files of public repositories that were
written without traindoc in mind: repository, commit (40 hex), path, and the mistakes that
traindoc's lint rules cover, marked by hand at their lines with a one-line reason. The project
holds only that list; the files themselves stay in checkouts outside the repository.

Making the checkouts. Bring each repository onto the machine (the session tool `fetch
github:OWNER/NAME`, or `git clone --bare`), then either let this script export the listed
commits from those git directories:

    python benchmarks/lint_real.py --export /work/.mirror --checkouts /tmp/lintbench

(it looks for OWNER+NAME/repo, OWNER+NAME/repo/.git or OWNER+NAME.git under the folder given and
writes every *.py file of the commit to CHECKOUTS/OWNER+NAME/, so sibling modules are there
too; a file listed at a second commit of a repository goes to OWNER+NAME@COMMIT12/), or make
them by hand, one folder per repository named OWNER+NAME, at the commit:

    git --git-dir=GITDIR ls-tree -r --name-only COMMIT | grep '\\.py$' | while read p; do
        mkdir -p "CHECKOUTS/OWNER+NAME/$(dirname "$p")"
        git --git-dir=GITDIR show "COMMIT:$p" > "CHECKOUTS/OWNER+NAME/$p"; done

Running it:

    python benchmarks/lint_real.py --checkouts /tmp/lintbench

lints every listed file (per repository in one call of the public ``lint_paths``, so a sibling
module is followed as in a user's run), and compares the findings with the marks by (path, line,
rule): a finding that is marked is a true positive, one that is not is a false positive, a mark
no finding matches is a false negative. Findings in files the manifest does not list are false
positives too (nobody judged them). It prints a table per rule and the misses, and exits 1 when
there is any false positive (2 when a checkout is missing or the manifest is malformed).

How the files were judged (method notes). Each file was read in full around its training flow:
the loop, the functions it calls, the optimizer, scheduler, scaler, checkpoint and validation
code. A line is marked only when the mistake is real for that code as it runs, judged by the
rule's own definition (its class docstring in src/traindoc/lint/rules/): e.g. a resume
checkpoint with a fixed name rewritten in place at every new best epoch and read back later is
``checkpoint-not-atomic``; a loss summed over micro-batches without division under Adam with no
weight decay was not marked (Adam is scale-invariant, the update does not change); a scheduler
rebuilt at the saved epoch (``last_epoch=epoch - 2``) is not missing from a checkpoint, but a
GradScaler left out of one is ``checkpoint-incomplete`` when the shipped configuration enables
fp16 (not when fp16 is off by default, as tacotron2's apex loss scale); a `last.pt` written with
``"optimizer": None`` by a script that cannot resume (yolov5's classify/train.py) is an export,
not a resume point; a try/except around a backward that a profiler times (yolov5's
torch_utils.profile) trains nothing; TD3's delayed actor step clears its own gradients first,
so it accumulates nothing; a validation pass under ``no_grad`` without ``.eval()`` on a model
built from layers with no dropout or running statistics (the Linear and LSTM models of
pytorch-tutorial) changes nothing and was not marked, nor a model left in eval mode after a
test on such a model (coRNN's adding task, TingsongYu's LeNet); joeynmt validates mid-epoch
but its ``_train_step`` calls ``model.train()`` before each forward. The GAN scripts of PyTorch-GAN were judged
from their training loops (the order of zero_grad, backward, step and detach per network). Most
files hold no mistake: they measure precision.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "benchmarks" / "lint_real_manifest.toml"
DEFAULT_CHECKOUTS = Path(os.environ.get("TRAINDOC_LINT_REAL", "/tmp/lintbench"))
COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Mark:
    rule: str
    line: int
    reason: str


@dataclass
class Entry:
    repo: str
    commit: str
    path: str
    marks: list[Mark] = field(default_factory=list)
    older: bool = False  # another commit of a repository listed at a first one: a folder of its own

    @property
    def folder(self) -> str:
        return self.repo.replace("/", "+") + (f"@{self.commit[:12]}" if self.older else "")


def load_manifest(path: Path, rule_ids: set[str]) -> list[Entry]:
    """The manifest's entries; ValueError naming the first malformed one."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    files = data.get("file")
    if not isinstance(files, list) or not files:
        raise ValueError(f"{path}: no [[file]] entries")
    out: list[Entry] = []
    seen: set[tuple[str, str, str]] = set()
    first: dict[str, str] = {}  # repository -> the commit its first entry names
    for i, item in enumerate(files):
        where = f"{path.name} entry {i + 1}"
        repo, commit, rel = item.get("repo"), item.get("commit"), item.get("path")
        if not isinstance(repo, str) or not REPO.match(repo):
            raise ValueError(f"{where}: repo must be 'owner/name', got {repo!r}")
        if not isinstance(commit, str) or not COMMIT.match(commit):
            raise ValueError(f"{where}: commit must be 40 lowercase hex digits, got {commit!r}")
        if not isinstance(rel, str) or not rel.endswith(".py") or rel.startswith("/") or ".." in rel.split("/"):
            raise ValueError(f"{where}: path must be a relative *.py path, got {rel!r}")
        if (repo, commit, rel) in seen:
            raise ValueError(f"{where}: {repo} {rel} is listed twice at {commit[:12]}")
        seen.add((repo, commit, rel))
        entry = Entry(repo, commit, rel, older=first.setdefault(repo, commit) != commit)
        mistakes = item.get("mistakes")
        if not isinstance(mistakes, list):
            raise ValueError(f"{where}: mistakes must be a list (empty when the file has none)")
        for m in mistakes:
            rule, line, reason = m.get("rule"), m.get("line"), m.get("reason")
            if rule not in rule_ids:
                raise ValueError(f"{where}: unknown lint rule {rule!r}")
            if not isinstance(line, int) or line < 1:
                raise ValueError(f"{where}: line must be a positive integer, got {line!r}")
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"{where}: every mistake needs a one-line reason")
            entry.marks.append(Mark(rule, line, reason))
        out.append(entry)
    return out


def export(entries: list[Entry], mirrors: Path, checkouts: Path) -> None:
    """Write every *.py file of each listed commit from its git directory under ``mirrors``."""
    for folder, commit in sorted({(e.folder, e.commit) for e in entries}):
        repo = folder.partition("@")[0]
        candidates = [mirrors / repo / "repo" / ".git", mirrors / repo / "repo", mirrors / f"{repo}.git"]
        gitdir = next((c for c in candidates if (c / "HEAD").is_file()), None)
        if gitdir is None:
            raise SystemExit(f"lint_real: error: no git directory for {repo} under {mirrors}")
        names = subprocess.run(["git", f"--git-dir={gitdir}", "ls-tree", "-r", "--name-only", commit],
                               check=True, capture_output=True, text=True).stdout.split("\n")
        for name in names:
            if not name.endswith(".py"):
                continue
            blob = subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{commit}:{name}"],
                                  check=True, capture_output=True).stdout
            target = checkouts / folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob)
        print(f"exported {folder} at {commit[:12]}", file=sys.stderr)


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def marked(self) -> int:
        return self.tp + self.fn


def run(entries: list[Entry], checkouts: Path) -> tuple[dict[str, Tally], list[str], list[str]]:
    """(tallies per rule, false positives, false negatives) as 'repo path:line rule' lines."""
    from traindoc.lint import lint_paths

    tallies: dict[str, Tally] = {}
    false_pos: list[str] = []
    false_neg: list[str] = []
    by_repo: dict[str, list[Entry]] = {}
    for e in entries:
        by_repo.setdefault(e.folder, []).append(e)
    for folder, group in sorted(by_repo.items()):
        base = (checkouts / folder).resolve()
        result = lint_paths([base / e.path for e in group], use_config=False)
        for err in result.errors:
            print(f"lint_real: {folder}: {err.render()}", file=sys.stderr)
        found = set()
        for f in result.findings:
            path = Path(f.path) if Path(f.path).is_absolute() else (Path.cwd() / f.path)
            try:
                rel = path.resolve().relative_to(base).as_posix()
            except ValueError:
                rel = f.path
            found.add((rel, f.line, f.finding.id))
        marked = {(e.path, m.line, m.rule) for e in group for m in e.marks}
        repo = group[0].repo
        for rel, line, rule in sorted(found):
            tally = tallies.setdefault(rule, Tally())
            if (rel, line, rule) in marked:
                tally.tp += 1
            else:
                tally.fp += 1
                false_pos.append(f"{repo} {rel}:{line} {rule}")
        for rel, line, rule in sorted(marked - found):
            tallies.setdefault(rule, Tally()).fn += 1
            false_neg.append(f"{repo} {rel}:{line} {rule}")
    return tallies, false_pos, false_neg


def table(tallies: dict[str, Tally], entries: list[Entry]) -> str:
    rows = [f"{'rule':<30} {'marked':>6} {'found':>6} {'FP':>4} {'FN':>4}"]
    total = Tally()
    for rule in sorted(tallies):
        t = tallies[rule]
        rows.append(f"{rule:<30} {t.marked:>6} {t.tp:>6} {t.fp:>4} {t.fn:>4}")
        total.tp, total.fp, total.fn = total.tp + t.tp, total.fp + t.fp, total.fn + t.fn
    rows.append(f"{'all rules':<30} {total.marked:>6} {total.tp:>6} {total.fp:>4} {total.fn:>4}")
    recall = f"{total.tp / total.marked:.0%}" if total.marked else "n/a"
    repos = len({e.repo for e in entries})
    rows.append(f"{len(entries)} files from {repos} repositories; recall {recall}; "
                f"false positives {total.fp}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkouts", type=Path, default=DEFAULT_CHECKOUTS,
                        help="folder with one OWNER+NAME checkout per repository "
                             "(default: $TRAINDOC_LINT_REAL or /tmp/lintbench)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--export", type=Path, metavar="MIRRORS",
                        help="first write the listed commits' *.py files from the git directories under MIRRORS")
    args = parser.parse_args(argv)

    from traindoc.lint.engine import lint_ids

    try:
        entries = load_manifest(args.manifest, set(lint_ids()))
    except (OSError, ValueError, tomllib.TOMLDecodeError) as e:
        print(f"lint_real: error: {e}", file=sys.stderr)
        return 2
    if args.export:
        export(entries, args.export, args.checkouts)
    missing = [f"{e.folder}/{e.path}" for e in entries if not (args.checkouts / e.folder / e.path).is_file()]
    if missing:
        print(f"lint_real: error: {len(missing)} listed files are not under {args.checkouts} "
              f"(first: {missing[0]}); see --export", file=sys.stderr)
        return 2
    tallies, false_pos, false_neg = run(entries, args.checkouts)
    print(table(tallies, entries))
    for line in false_pos:
        print(f"false positive: {line}")
    for line in false_neg:
        print(f"missed: {line}")
    return 1 if false_pos else 0


if __name__ == "__main__":
    sys.exit(main())
