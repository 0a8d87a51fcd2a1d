"""Peak memory and time of `traindoc ckpt inspect` on a ~2 GB training checkpoint.

    python benchmarks/ckpt_memory.py [--gb 2.0] [--format pt|safetensors] [--keep DIR]

Writes a training checkpoint in a temp folder (fp32 model with one large embedding, AdamW
state with exp_avg/exp_avg_sq for every parameter, scheduler, step), runs `traindoc ckpt
inspect` on it in a subprocess, and reports:

* peak RSS (the kernel's high-water mark, ``ru_maxrss`` of the child), which counts the
  pages of the memory-mapped file that were resident at the same time;
* peak anonymous RSS (``RssAnon`` from /proc, sampled every 2 ms): memory the process
  allocated itself, i.e. what cannot be dropped under pressure;
* wall time;
* for contrast, the same numbers for a plain ``torch.load(path, weights_only=True)``.

The checkpoint is deleted afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def write_checkpoint(path: Path, gb: float, fmt: str) -> int:
    """A realistic layout: model + AdamW state (2 tensors per parameter) = 3x the model."""
    import torch

    model_bytes = gb * (1 << 30) / (3 if fmt == "pt" else 1)
    dim = 2048
    vocab = int(model_bytes * 0.6 / 4 / dim)  # one large embedding: 60% of the model
    layers = max(1, int(model_bytes * 0.4 / 4 / (dim * dim * 2)))
    g = torch.Generator().manual_seed(0)
    model: dict[str, torch.Tensor] = {"embed.weight": torch.randn(vocab, dim, generator=g) * 0.02}
    for i in range(layers):
        model[f"layers.{i}.norm.weight"] = torch.ones(dim)
        model[f"layers.{i}.up.weight"] = torch.randn(dim * 2, dim, generator=g) * 0.02
        model[f"layers.{i}.up.bias"] = torch.zeros(dim * 2)
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(model, str(path), metadata={"format": "pt"})
        return path.stat().st_size
    names = list(model)
    state = {i: {"step": torch.tensor(1000.0), "exp_avg": torch.randn_like(model[n]) * 1e-4,
                 "exp_avg_sq": torch.rand_like(model[n]) * 1e-8} for i, n in enumerate(names)}
    groups = [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False,
               "initial_lr": 3e-4, "params": list(range(len(names)))}]
    sched = {"base_lrs": [3e-4], "last_epoch": 1000, "_step_count": 1001, "_last_lr": [3e-4]}
    torch.save({"model": model, "optimizer": {"state": state, "param_groups": groups},
                "scheduler": sched, "step": 1000}, path)
    return path.stat().st_size


def measure(argv: list[str]) -> tuple[float, int, int, int, str]:
    """(seconds, peak RSS bytes, peak anonymous RSS bytes, exit code, stderr tail).

    Peak RSS is the child's own VmHWM (its high-water mark since exec), read from /proc just
    before it exits; ``ru_maxrss`` would also count the parent's pages at fork time.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = {"VmHWM:": 0, "RssAnon:": 0}
    done = threading.Event()

    def sample() -> None:
        status = f"/proc/{proc.pid}/status"
        while not done.is_set():
            try:
                with open(status) as fh:
                    for line in fh:
                        key = line.split(":", 1)[0] + ":"
                        if key in peak:
                            peak[key] = max(peak[key], int(line.split()[1]) * 1024)
            except (OSError, ValueError, IndexError):
                return
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    err = proc.stderr.read() if proc.stderr else ""  # returns at exit; the sampler ran until then
    proc.wait()
    done.set()
    t.join()
    return time.perf_counter() - start, peak["VmHWM:"], peak["RssAnon:"], proc.returncode, err[-2000:]


def mib(n: float) -> str:
    return f"{n / (1 << 20):8.1f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=2.0, help="checkpoint size in GiB (default 2)")
    ap.add_argument("--format", choices=("pt", "safetensors"), default="pt")
    ap.add_argument("--keep", metavar="DIR", help="write the checkpoint here and keep it")
    ap.add_argument("--no-baseline", action="store_true", help="skip the plain torch.load comparison")
    ap.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        write_checkpoint(Path(args.write), args.gb, args.format)
        return 0
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc: Linux only", file=sys.stderr)
        return 2
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="traindoc-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench.{args.format}"
    try:
        t0 = time.perf_counter()
        # written by a child process, so that this one stays small while measuring
        subprocess.run([sys.executable, __file__, "--write", str(path), "--gb", str(args.gb),
                        "--format", args.format], check=True)
        size = path.stat().st_size
        print(f"checkpoint: {path} ({args.format}), {mib(size).strip()} on disk, written in "
              f"{time.perf_counter() - t0:.1f} s")
        empty = measure([sys.executable, "-c", "import torch"])
        floor = "python -c 'import torch' (floor)"
        print(f"{floor:<37} peak RSS {mib(empty[1])}, peak anon {mib(empty[2])}, {empty[0]:6.1f} s")
        rows = [("traindoc ckpt inspect", [sys.executable, "-m", "traindoc", "ckpt", "inspect", str(path),
                                            "--json", str(folder / "report.json")])]
        if not args.no_baseline and args.format == "pt":
            rows.append(("torch.load(weights_only=True)",
                         [sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=True)"]))
        for label, argv in rows:
            secs, peak, anon, code, err = measure(argv)
            if code != 0:
                print(f"{label} failed (exit {code}):\n{err}", file=sys.stderr)
                return 1
            print(f"{label:<37} peak RSS {mib(peak)} ({peak / size:5.1%} of file), "
                  f"peak anon {mib(anon)} ({anon / size:5.1%}), {secs:6.1f} s")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
