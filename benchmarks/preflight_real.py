"""`traindoc preflight` on the real training scripts of live_real's manifest, read where they live.

Each single-process case of benchmarks/live_real_manifest.toml (nanoGPT's train.py, minGPT,
PyTorch's examples, CleanRL ...) runs once as ``traindoc preflight --budget B SCRIPT ARGS``,
with the case's own command line (its lengths, ``{60n}``, ten times as long: the probes stop
the launches themselves), data and environment (live_real's ``prepare``), with
OMP_NUM_THREADS=1:

    python benchmarks/preflight_real.py --export /work/.mirror --checkouts /tmp/livebench
    python benchmarks/preflight_real.py --checkouts /tmp/livebench --case nanogpt-char

A case with ``preflight_resume`` in the manifest (the arguments that make the script resume,
nanoGPT's ``--init_from=resume``) gets them as ``--resume-args``; its output folder (``{out}``)
stays the absolute one live_real gives it, as a user's would.

Judged per case:

- *ran*: preflight's exit status is 0 (every probe passed or said why it could not run) or 3
  (a probe failed), never 1 (the script raised in the baseline launch, which it does not
  without traindoc: live_real runs each of these scripts bare) or anything else;
- *false failures*: probes that failed on this healthy code, other than the case's
  ``preflight`` entries (each with its reason in ``why``);
- the verdict of each probe, and the seconds preflight took.

Reinforcement-learning loops are listed with their verdicts too: their loss is not a
function of a fixed batch, so ``overfit`` and ``lr`` say ``n/a`` there or judge what they can.
Exit status 1 when a case does not run or a probe fails that the manifest does not expect; 2
when a checkout is missing or the manifest is malformed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_real import DEFAULT_CHECKOUTS, PREPARE, Case, chosen_cases  # noqa: E402

# The manifest's lengths ({60n}) are sized for seconds of bare training; the probes stop the
# launches themselves (5 steps, 150 on the repeated batch ...), and judge a script that ends
# sooner on what it ran: ten times as long leaves them room.
LONGER = 10
PROBES = ("initial-loss", "gradients", "overfit", "eval", "resume", "lr")
SHORT = {"pass": "pass", "fail": "FAIL", "n/a": "n/a"}


def _preflight(case: Case, root: Path, scratch: Path, budget: float) -> tuple[int, dict[str, str], str, float]:
    """(exit status, probe -> verdict, the last lines of stderr, seconds)."""
    out = Path(tempfile.mkdtemp(dir=scratch))
    subst = {"{out}": str(out), "{root}": str(root)}

    def fill(s: str) -> str:
        for k, v in subst.items():
            s = s.replace(k, v)
        return re.sub(r"\{(\d+)n\}", lambda m: str(int(m.group(1)) * LONGER), s)

    report = out / "preflight.json"
    resume = ["--resume-args", case.preflight_resume] if case.preflight_resume else []
    cmd = [sys.executable, "-m", "traindoc", "preflight", "--budget", str(budget), "--json", str(report), *resume,
           str(root / case.script), *(fill(a) for a in case.args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **{k: fill(v) for k, v in case.env.items()}}
    if "PYTHONPATH" in case.env and os.environ.get("PYTHONPATH"):  # the caller's (a traindoc to compare) first
        env["PYTHONPATH"] = os.environ["PYTHONPATH"] + os.pathsep + env["PYTHONPATH"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root / case.cwd, env=env, capture_output=True, text=True,
                          timeout=budget * 3 + 300)
    seconds = time.perf_counter() - t0
    verdicts: dict[str, str] = {}
    if report.is_file():
        for v in json.loads(report.read_text(encoding="utf-8")).get("preflight", {}).get("probes", []):
            verdicts[v["probe"]] = v["status"] + ("" if v["status"] == "pass" else f": {v['summary'][:160]}")
    return proc.returncode, verdicts, proc.stderr[-600:], seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkouts", type=Path, default=DEFAULT_CHECKOUTS)
    ap.add_argument("--export", type=Path, metavar="MIRRORS",
                    help="first write each listed commit's *.py files from the git directories under MIRRORS")
    ap.add_argument("--case", action="append", help="only these cases (by name)")
    ap.add_argument("--budget", type=float, default=120.0, help="preflight's --budget per case (seconds)")
    ap.add_argument("--verbose", action="store_true", help="print every verdict's summary")
    args = ap.parse_args(argv)
    try:  # one process each: a torchrun job cannot be preflighted
        cases = [c for c in chosen_cases(args.case, args.export, args.checkouts) if c.nproc == 1]
    except ValueError as e:
        print(f"preflight_real: error: {e}", file=sys.stderr)
        return 2
    failed = False
    rows = ["| case | exit | " + " | ".join(PROBES) + " | false failures | seconds |",
            "|---|---|" + "---|" * len(PROBES) + "---|---|"]
    with tempfile.TemporaryDirectory(prefix="preflight_real_") as tmp:
        for case in cases:
            root = args.checkouts / case.folder
            lacking = [m for m in case.needs if importlib.util.find_spec(m) is None]
            if lacking:
                rows.append(f"| {case.name} | not run: this Python lacks {', '.join(lacking)} |" + " |" * (len(PROBES) + 2))
                print(rows[-1], file=sys.stderr)
                continue
            if case.prepare:
                PREPARE[case.prepare](root / case.cwd)
            rc, verdicts, tail, seconds = _preflight(case, root, Path(tmp), args.budget)
            false = sorted(p for p, v in verdicts.items() if v.startswith("fail") and p not in case.preflight)
            bad = rc not in (0, 3) or not verdicts
            failed = failed or bad or bool(false)
            cells = [SHORT.get(verdicts.get(p, "-").split(":")[0], "-") for p in PROBES]
            rows.append(f"| {case.name} | {rc} | " + " | ".join(cells) + f" | {', '.join(false) or 'none'} | {seconds:.0f} |")
            print(rows[-1], file=sys.stderr)
            if args.verbose or bad or false:
                for p in PROBES:
                    if p in verdicts and verdicts[p] != "pass":
                        print(f"    {p}: {verdicts[p]}", file=sys.stderr)
                if bad:
                    print("    " + tail.replace("\n", "\n    "), file=sys.stderr)
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
