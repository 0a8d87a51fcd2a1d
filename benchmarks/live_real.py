"""`traindoc run` on real training scripts, read where they live: same training, no false alarm,
and what watching costs.

The manifest (benchmarks/live_real_manifest.toml) lists scripts of public repositories written
without traindoc in mind (nanoGPT's train.py, minGPT's adder, PyTorch's examples), each with a
tiny command line. The project holds only that list and the data preparation below: the scripts
stay in checkouts outside the repository, exported from the git directories that `fetch
github:OWNER/NAME` brings (OWNER+NAME/repo under the folder given):

    python benchmarks/live_real.py --export /work/.mirror --checkouts /tmp/livebench
    python benchmarks/live_real.py --checkouts /tmp/livebench --repeat 3 --timing

Each case runs ``--repeat`` times as ``python SCRIPT`` and as ``traindoc run SCRIPT``, in turn,
with OMP_NUM_THREADS=1 (bit-reproducible on CPU). Judged:

- *identical*: the weights the script saves (``state``) are equal tensor for tensor, and the
  stdout lines the case names (``lines``: losses, scores) are equal to the character;
- *false alarms*: warning and error findings other than the case's ``expect`` (each expected
  id carries the reason it is right for that code);
- *cost*: the child processes' CPU time (user + system, DataLoader workers included) under
  traindoc over bare, the median over the repeats of the paired ratios, two ways. The whole
  run, as a user sees it (start-up, data, evaluation, saving; traindoc's own start-up and
  report, about 0.5 s here, weigh heavily on a run of seconds); and per step: the same case
  run ``longer`` times as long (3 unless the manifest says; the ``{60n}`` arguments), the cost
  of the extra steps, ``(observed_n - observed_1) / (bare_n - bare_1)``, which leaves the fixed
  costs out. A case whose steps take milliseconds needs a long extra stretch for this to be
  steadier than the machine's noise (nanoGPT's tiny model: 10 times). A script whose length is
  written in it (no ``{60n}`` argument: ``longer = 1``) is timed on its judged runs, whole only.

The reinforcement-learning cases need gymnasium and tyro (``pip install gymnasium tyro``: CartPole
is pure Python, CleanRL reads its command line with tyro); code written against gym 0.26 gets
gymnasium under gym's name, its episodes capped (``gym``). A script that saves no weights where
the benchmark can find them (CleanRL's, into a folder named after the time) has its models'
weights written at exit (``exit_state``). The data each script reads is made here (``prepare``): a word corpus drawn from a small
random grammar (seeded), its characters for nanoGPT, sine waves for the sequence model, each
sized so that a run takes seconds; a script that never seeds torch is seeded at start-up
(``torch_seed``: a sitecustomize on its PYTHONPATH). PyTorch-GAN's scripts import torchvision,
whose wheels need a torch build this machine does not have: ``vision`` writes a stand-in with
the three things they use (``datasets.MNIST`` drawing digit-like strokes, ``transforms``,
``utils.save_image`` writing nothing), seeds numpy and torch, and writes the weights at exit.

A case that ``needs`` modules this Python lacks is listed as not run, with what it needs. timm's
train.py needs the real torchvision, whose wheel here goes with torch 2.14.1, not the project's
pinned 2.13.0: those cases run in an environment of their own, with traindoc installed in it,

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        pyyaml huggingface_hub safetensors && /tmp/tv/bin/pip install -e .
    /tmp/tv/bin/python benchmarks/live_real.py --case timm-resnet-ema ...

on an image folder written here (``image_folder``: 4 classes of 32x32 PNGs, colour and a square
telling them apart). lightly's examples (``pip install lightly`` in the same environment)
download CIFAR-10, seed nothing and save nothing: ``cifar`` draws the images instead, seeds
torch and writes the weights at exit; Pytorch-UNet's train.py (same environment, with wandb
disabled) reads a Carvana-style folder that ``carvana`` writes, jindongwang's activity-recognition CNN (same
environment, with scikit-learn and matplotlib) the UCI HAR archive that ``har`` draws. A torchrun job (``nproc``) runs as ``python -m torch.distributed.run
--standalone --nproc_per_node N`` bare and with ``-m traindoc run``, each rank writing its own
weights at exit (``exit_state``: its local shards of DTensors); PyTorch's distributed examples
pick their device through ``torch.accelerator`` and stop without two GPUs, so ``cpu_accelerator``
makes it answer with the CPU (gloo) and seeds torch, whose model initialization they leave
unseeded; scripts that name GPU indices and nccl outright (PyTorch's DDP tutorial series) get
``cuda_as_cpu``, which maps those to the CPU and gloo. A library with no training script of its own (denoising-diffusion-pytorch)
runs the driver its README shows, written into its checkout by ``prepare``.

Exit status 1 when a case is not identical, raises a false alarm or fails; 2 when a checkout is
missing or the manifest is malformed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lint_real import Entry, export  # noqa: E402  (the same export of a commit's *.py files)

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "benchmarks" / "live_real_manifest.toml"
DEFAULT_CHECKOUTS = Path(os.environ.get("TRAINDOC_LIVE_REAL", "/tmp/livebench"))


@dataclass
class Case:
    name: str
    repo: str
    commit: str
    script: str
    args: list[str]
    cwd: str = ""
    prepare: str = ""
    env: dict[str, str] = field(default_factory=dict)
    state: str = ""
    key: str = ""
    lines: str = ""
    expect: list[str] = field(default_factory=list)
    why: str = ""
    longer: int = 3  # the length factor of the timing's longer run
    nproc: int = 1  # ranks of a torchrun job (each saves its own state: STATE.rankN)
    needs: list[str] = field(default_factory=list)  # modules it imports that a plain set-up lacks
    preflight: list[str] = field(default_factory=list)  # probes benchmarks/preflight_real.py sees fail, rightly
    preflight_why: str = ""  # the reason for each
    preflight_resume: str = ""  # the arguments that make the script resume (preflight's --resume-args)
    older: bool = False  # another commit of a repository listed at a first one: a folder of its own

    @property
    def folder(self) -> str:
        return self.repo.replace("/", "+") + (f"@{self.commit[:12]}" if self.older else "")


def load_manifest(path: Path) -> list[Case]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    cases = []
    first: dict[str, str] = {}  # repository -> the commit its first case names
    for i, item in enumerate(data.get("case", [])):
        unknown = set(item) - {f.name for f in fields(Case)}
        if unknown or not {"name", "repo", "commit", "script", "args"} <= set(item):
            raise ValueError(f"{path.name} case {i + 1}: unknown fields {sorted(unknown)} or a required one missing")
        case = Case(**item)
        case.older = first.setdefault(case.repo, case.commit) != case.commit
        if case.prepare and case.prepare not in PREPARE:
            raise ValueError(f"{path.name} case {case.name}: no preparation named {case.prepare!r}")
        if not (case.state or case.lines):
            raise ValueError(f"{path.name} case {case.name}: nothing to compare (state or lines)")
        cases.append(case)
    if not cases:
        raise ValueError(f"{path}: no [[case]] entries")
    return cases


# ---- data the scripts read (written here, seeded) ----------------------------------------------
def _corpus(lines: int, seed: int = 0) -> str:
    """Sentences of a small random grammar: words made of syllables, a Zipf-like choice of them
    and a few fixed phrases, so that a language model has something to learn."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "an", "el"]
    words = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 3))) for _ in range(600)})
    weights = [1.0 / (r + 1) for r in range(len(words))]
    phrases = [" ".join(rng.choices(words[:40], k=3)) for _ in range(20)]
    out = []
    for _ in range(lines):
        parts = [rng.choice(phrases) if rng.random() < 0.3 else " ".join(rng.choices(words, weights, k=2))
                 for _ in range(rng.randint(3, 7))]
        out.append(" ".join(parts) + " .")
    return "\n".join(out) + "\n"


def _words(where: Path) -> None:
    """train/valid/test.txt for word_language_model (its data.Corpus reads these three)."""
    folder = where / "live_real_words"
    folder.mkdir(exist_ok=True)
    for name, n, seed in (("train", 2500, 0), ("valid", 400, 1), ("test", 300, 2)):
        (folder / f"{name}.txt").write_text(_corpus(n, seed), encoding="utf-8")


def _nanogpt_chars(where: Path) -> None:
    """data/live_real_chars/{train,val}.bin and meta.pkl, as nanoGPT's char-level prepare.py
    writes them (uint16 token ids, the vocabulary in meta.pkl)."""
    import numpy as np

    text = _corpus(3000)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    folder = where / "data" / "live_real_chars"
    folder.mkdir(parents=True, exist_ok=True)
    cut = int(0.9 * len(ids))
    ids[:cut].tofile(folder / "train.bin")
    ids[cut:].tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)


def _sine_waves(where: Path) -> None:
    """traindata.pt as the example's generate_sine_wave.py makes it (a float64 numpy array of
    shifted sine waves), 100 waves of 300 points instead of 1,000 so a run takes seconds."""
    import numpy as np
    import torch

    rng = np.random.RandomState(2)
    x = np.arange(300)[None, :] + rng.randint(-80, 80, (100, 1))
    torch.save(np.sin(x / 20.0).astype("float64"), where / "traindata.pt")


def _citations(folder: Path, nodes: int = 1600, features: int = 300, classes: int = 7) -> None:
    """cora.content and cora.cites in the Cora format pygcn and pyGAT read (``<id> <0/1
    features> <label>`` per paper, ``<cited> <citing>`` per link): papers whose words and links
    follow their class (75% of links within it), enough of them for the scripts' fixed splits
    (train 0-139, validation 200-499, test 500-1499). The repositories' own Cora files are not
    in the mirrors (large blobs are left out)."""
    rng = random.Random(3)
    labels = [f"topic_{rng.randrange(classes)}" for _ in range(nodes)]
    vocab = {c: rng.sample(range(features), 40) for c in sorted(set(labels))}
    rows = []
    for i, label in enumerate(labels):
        words = set(rng.sample(vocab[label], 8)) | {rng.randrange(features) for _ in range(4)}
        rows.append(" ".join([str(1000 + i), *("1" if w in words else "0" for w in range(features)), label]))
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    links = set()
    while len(links) < 3 * nodes:
        a = rng.randrange(nodes)
        b = rng.choice(by_class[labels[a]]) if rng.random() < 0.75 else rng.randrange(nodes)
        if a != b:
            links.add((1000 + a, 1000 + b))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cora.content").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(links)), encoding="utf-8")


def _names(where: Path) -> None:
    """live_real_names.txt, one made-up name a line (makemore's names.txt is 32,000 of them):
    syllables drawn with a bias, so that a character model has a distribution to learn."""
    rng = random.Random(4)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "an", "el", "ja", "ys"]
    names = ["".join(rng.choices(syllables, range(len(syllables), 0, -1), k=rng.choice([1, 2, 2, 3, 3, 4])))
             for _ in range(5000)]
    (where / "live_real_names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")


def _text(where: Path) -> None:
    """input.txt, the text a script with its data path written in reads (ng-video-lecture's
    Shakespeare, 1 MB there): the grammar's corpus, 250 kB."""
    (where / "input.txt").write_text(_corpus(3000), encoding="utf-8")


def _chargpt_text(where: Path) -> None:
    """input.txt for minGPT's chargpt, whose sampling every 500 iterations starts from the
    context "O God, O God!": its characters must be in the text's vocabulary."""
    (where / "input.txt").write_text("O God, O God!\n" + _corpus(2000), encoding="utf-8")


def _torch_seed(where: Path) -> None:
    """live_real_seed/sitecustomize.py, which seeds torch at start-up, for a script that never
    seeds it (each process would draw other data): the case's PYTHONPATH names the folder, so
    that the bare and the watched run see the same numbers."""
    folder = where / "live_real_seed"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text("import torch\n\ntorch.manual_seed(0)\n", encoding="utf-8")


_GYM = '''"""gym for scripts written against gym 0.26: gymnasium's environments (the same API),
the first reset seeded, and the process ended (status 0) when LIVE_REAL_EPISODES episodes
have run, for a script whose episode count is written in it. LIVE_REAL_GYM_OLD=1: gym's API
before 0.26 (reset() returns the observation, step() four values) for older scripts."""
import os
import sys

import gymnasium
from gymnasium import *  # noqa: F401,F403

_LIMIT = int(os.environ.get("LIVE_REAL_EPISODES", "300"))
_OLD = os.environ.get("LIVE_REAL_GYM_OLD") == "1"
_episodes = 0


class _Capped(gymnasium.Wrapper):
    def reset(self, **kwargs):
        global _episodes
        if _episodes >= _LIMIT:
            sys.stdout.flush()
            sys.exit(0)
        if _episodes == 0:
            kwargs.setdefault("seed", 0)
        _episodes += 1
        out = self.env.reset(**kwargs)
        return out[0] if _OLD else out

    def step(self, action):
        out = self.env.step(action)
        if _OLD:
            obs, reward, terminated, truncated, info = out
            return obs, reward, terminated or truncated, info
        return out


def make(*args, **kwargs):
    return _Capped(gymnasium.make(*args, **kwargs))
'''


def _gym(where: Path) -> None:
    """live_real_gym/: ``gym.py`` (gymnasium under gym's name, its first reset seeded, the
    process ended after LIVE_REAL_EPISODES episodes) and a sitecustomize seeding ``random`` and
    torch, for code written against gym 0.26 that seeds nothing (seungeunrho/minimalRL)."""
    folder = where / "live_real_gym"
    folder.mkdir(exist_ok=True)
    (folder / "gym.py").write_text(_GYM, encoding="utf-8")
    (folder / "sitecustomize.py").write_text(
        "import random\n\nimport torch\n\nrandom.seed(0)\ntorch.manual_seed(0)\n", encoding="utf-8")


_EXIT_STATE = '''"""At exit, the weights of every nn.Module alive, to LIVE_REAL_STATE (live_real.py)."""
import atexit
import gc
import hashlib
import os


def _local(v):
    return v.to_local() if hasattr(v, "to_local") else v  # a rank's part of a DTensor


def _save():
    import torch

    models = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.nn.Module) and next(obj.parameters(), None) is not None:
            state = {k: _local(v).detach().cpu().clone() for k, v in obj.state_dict().items()}
            # bytes, whatever the dtype (numpy has no bfloat16)
            digest = hashlib.sha1(b"".join(t.reshape(-1).view(torch.uint8).numpy().tobytes()
                                           for t in state.values())).hexdigest()
            models.append((type(obj).__name__, digest, state))
    # In an order of their own (gc's order is not): class, then contents
    models.sort(key=lambda m: m[:2])
    # a torchrun job: one file per rank (its launcher saves nothing); one rank: the file itself
    rank = os.environ.get("RANK") if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    torch.save({f"{i} {cls} {k}": v for i, (cls, _, state) in enumerate(models) for k, v in state.items()},
               os.environ["LIVE_REAL_STATE"] + (f".rank{rank}" if rank is not None else ""))


atexit.register(_save)
'''


_CPU_ACCELERATOR = '''
import torch

# This machine's CPU as the "accelerator" the script asks for (torch.accelerator), with a device
# per rank, so that a multi-GPU example runs its ranks on gloo here.
torch.accelerator.is_available = lambda: True
torch.accelerator.device_count = lambda: int(os.environ.get("WORLD_SIZE", "1"))
torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cpu")
torch.manual_seed(0)  # the model's initialization: the examples seed only their batches
'''


def _cpu_accelerator(where: Path) -> None:
    """live_real_cpu/sitecustomize.py: the weights at exit (``exit_state``, a file per rank),
    torch seeded, and ``torch.accelerator`` answering with the CPU, for PyTorch's distributed
    examples, which pick their device (and the mesh's) through it and stop when fewer than two
    accelerators exist."""
    folder = where / "live_real_cpu"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + _CPU_ACCELERATOR, encoding="utf-8")


_CUDA_AS_CPU = '''
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# Scripts written for GPUs only (a device given as a GPU index, nccl), run on this machine's CPU:
# an index becomes the CPU, nccl becomes gloo, DDP gets no device ids; torch seeded for the
# model's initialization; the run's files land in LIVE_REAL_CWD (a fresh folder per run), so
# that a snapshot one run writes is not resumed by the next.
def _cpu(args):
    return tuple("cpu" if type(a) is int else a for a in args)

_module_to, _tensor_to = torch.nn.Module.to, torch.Tensor.to
torch.nn.Module.to = lambda self, *a, **k: _module_to(self, *_cpu(a), **k)
torch.Tensor.to = lambda self, *a, **k: _tensor_to(self, *_cpu(a), **k)
torch.cuda.set_device = lambda device: None
_init_pg = dist.init_process_group
dist.init_process_group = lambda *a, **k: _init_pg(*a[1:], **{**k, "backend": "gloo"})
_ddp_init = DistributedDataParallel.__init__
DistributedDataParallel.__init__ = lambda self, module, *a, **k: _ddp_init(self, module, **{**k, "device_ids": None})
torch.manual_seed(0)
if os.environ.get("LIVE_REAL_CWD"):
    os.chdir(os.environ["LIVE_REAL_CWD"])
'''


def _cuda_as_cpu(where: Path) -> None:
    """live_real_cuda/sitecustomize.py: the weights at exit (``exit_state``, a file per rank), and
    a GPU-only script's device indices, nccl and DDP device ids turned to the CPU and gloo, for
    PyTorch's DDP tutorial series (``model.to(gpu_id)``, ``init_process_group(backend="nccl")``)."""
    folder = where / "live_real_cuda"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + _CUDA_AS_CPU, encoding="utf-8")


def _exit_state(where: Path) -> None:
    """live_real_exit/sitecustomize.py: at exit, the weights of every model alive (the live ones
    only: a model's submodules are saved with it and again on their own), to LIVE_REAL_STATE."""
    folder = where / "live_real_exit"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXIT_STATE, encoding="utf-8")


def _seeded_exit_state(where: Path) -> None:
    """live_real_exit/sitecustomize.py for a script that neither seeds nor saves weights: torch
    and numpy seeded at start-up and the weights written at exit (as ``exit_state``)."""
    folder = where / "live_real_exit"
    folder.mkdir(exist_ok=True)
    seed = "import numpy\nimport torch\n\nnumpy.random.seed(0)\ntorch.manual_seed(0)\n"
    (folder / "sitecustomize.py").write_text(seed + _EXIT_STATE, encoding="utf-8")


_VISION = {
    "__init__.py": '''"""A stand-in for torchvision, written by benchmarks/live_real.py: the wheels of the real
one need a torch build this machine does not have. It holds what the GAN scripts of
PyTorch-GAN import: datasets.MNIST (drawn digits-like images), transforms, utils.save_image."""
from . import datasets, transforms, utils  # noqa: F401
''',
    "datasets.py": '''import os

import numpy as np
import torch


class MNIST(torch.utils.data.Dataset):
    """LIVE_REAL_IMAGES images of 28x28 uint8 pixels and labels 0-9, the same in every process:
    per class a stroke at its own angle and offset, drawn with noise."""

    def __init__(self, root, train=True, download=False, transform=None, target_transform=None):
        rng = np.random.RandomState(0 if train else 1)
        n = int(os.environ.get("LIVE_REAL_IMAGES", "1280"))
        yy, xx = np.mgrid[0:28, 0:28] - 13.5
        self.targets = rng.randint(0, 10, n)
        angle = self.targets * np.pi / 10 + rng.normal(0, 0.1, n)
        offset = (self.targets % 5 - 2) * 3 + rng.normal(0, 1, n)
        dist = np.abs(np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy - offset[:, None, None])
        ink = np.clip(255 * np.exp(-dist**2 / 4) + rng.normal(0, 20, (n, 28, 28)), 0, 255)
        self.data = torch.from_numpy(ink.astype(np.uint8))
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        img, target = self.data[i], int(self.targets[i])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target
''',
    "transforms.py": '''import torch
import torch.nn.functional as F


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class Resize:
    """A uint8 HxW image to size x size, bilinear."""

    def __init__(self, size):
        self.size = size if isinstance(size, int) else size[0]

    def __call__(self, img):
        if img.shape[-1] == self.size:
            return img
        out = F.interpolate(img[None, None].float(), size=(self.size, self.size), mode="bilinear", align_corners=False)
        return out[0, 0].round().clamp(0, 255).to(torch.uint8)


class ToTensor:
    def __call__(self, img):
        return img[None].float() / 255


class Lambda:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

    def __call__(self, x):
        return (x - self.mean) / self.std
''',
    "utils.py": '''def save_image(tensor, fp, **kwargs):
    """Nothing is written: the benchmark compares the weights and the printed losses."""
''',
}


def _vision(where: Path) -> None:
    """live_real_vision/: ``torchvision`` (the stand-in above) and a sitecustomize that seeds
    numpy and torch at start-up and writes the models' weights at exit (``exit_state``), for
    PyTorch-GAN's scripts, which seed nothing and save no weights."""
    folder = where / "live_real_vision"
    (folder / "torchvision").mkdir(parents=True, exist_ok=True)
    for name, text in _VISION.items():
        (folder / "torchvision" / name).write_text(text, encoding="utf-8")
    seed = "import numpy\nimport torch\n\nnumpy.random.seed(0)\ntorch.manual_seed(0)\n"
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + "\n" + seed, encoding="utf-8")


_CIFAR = '''
import os

import numpy
import torch
import torchvision
from PIL import Image


class _CIFAR10(torch.utils.data.Dataset):
    """CIFAR-10 as torchvision's class gives it (PIL images, int labels), drawn here: 10 classes
    of 32x32 images told apart by colour and a bright square's place, LIVE_REAL_IMAGES of them."""

    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        rng = numpy.random.default_rng(0 if train else 1)
        n = int(os.environ.get("LIVE_REAL_IMAGES", "768"))
        self.targets = rng.integers(0, 10, n).tolist()
        self.data = rng.integers(0, 90, (n, 32, 32, 3)).astype(numpy.uint8)
        for img, c in zip(self.data, self.targets):
            img[:, :, c % 3] += 60 + 30 * (c // 3 % 3)
            y, x = 4 + 6 * (c // 4), 4 + 8 * (c % 4)
            img[y:y + 10, x:x + 10] = 240
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        img, target = Image.fromarray(self.data[i]), self.targets[i]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


torchvision.datasets.CIFAR10 = _CIFAR10
torch.manual_seed(0)  # the examples seed nothing
'''


def _cifar(where: Path) -> None:
    """live_real_cifar/sitecustomize.py: torchvision's CIFAR10 drawn here (no download), torch
    seeded, and the weights at exit (``exit_state``), for lightly's examples, which download
    CIFAR-10, seed nothing and save no weights."""
    folder = where / "live_real_cifar"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + _CIFAR, encoding="utf-8")


def _har(where: Path) -> None:
    """``Your data_har.npy folder/data_har.npz``, the placeholder folder jindongwang's activity
    recognition config names, relative to where the script runs: 320 training and 128 test
    windows of 9 inertial channels x 128 samples, 6 activities told apart by the frequency on
    one channel, labels one-hot as its loader expects; and the weights at exit
    (``exit_state``: the script saves none)."""
    import numpy as np

    rng = np.random.default_rng(0)
    t = np.arange(128) / 50.0

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 6, n)
        x = 0.3 * rng.standard_normal((n, 128, 9))
        x[np.arange(n), :, y % 9] += np.sin(2 * np.pi * (1 + y)[:, None] * t)
        return x, np.eye(6)[y]

    folder = where / "Your data_har.npy folder"
    folder.mkdir(exist_ok=True)
    (x_train, y_train), (x_test, y_test) = draw(320), draw(128)
    np.savez(folder / "data_har.npz", X_train=x_train, Y_train=y_train, X_test=x_test, Y_test=y_test)
    _exit_state(where)

def _image_folder(where: Path) -> None:
    """live_real_images/{train,validation}/classN/*.png, as torchvision's ImageFolder reads them."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, per_class in (("train", 12), ("validation", 4)):
        for c in range(4):
            folder = where / "live_real_images" / split / f"class{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                img = rng.integers(0, 80, (32, 32, 3)).astype(np.uint8)
                img[:, :, c % 3] += 100 + 40 * (c // 3)
                if c == 3:
                    img[8:24, 8:24] = 250
                Image.fromarray(img).save(folder / f"{i}.png")


def _carvana(where: Path) -> None:
    """data/imgs/N.png and data/masks/N_mask.png as Pytorch-UNet's CarvanaDataset reads them
    (64x64 RGB images with a bright disc, masks of 0 and 255), and live_real_seed/ with a
    sitecustomize that seeds torch (the script leaves the model's initialization unseeded) and
    writes the weights at exit (``exit_state``)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images, masks = where / "data" / "imgs", where / "data" / "masks"
    images.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[:64, :64]
    for i in range(40):
        cy, cx, r = rng.integers(16, 48), rng.integers(16, 48), rng.integers(6, 14)
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        img = rng.integers(0, 90, (64, 64, 3)).astype(np.uint8)
        img[inside] += np.array([120, 60, 20], dtype=np.uint8)
        Image.fromarray(img).save(images / f"{i:03d}.png")
        Image.fromarray((inside * 255).astype(np.uint8)).save(masks / f"{i:03d}_mask.png")
    folder = where / "live_real_seed"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + "\nimport torch\n\ntorch.manual_seed(0)\n",
                                             encoding="utf-8")


_DDPM_1D = """import sys

import torch
from denoising_diffusion_pytorch import Dataset1D, GaussianDiffusion1D, Trainer1D, Unet1D

# A user's driver, as the library's README writes one: a 1-D U-Net denoiser on sine/cosine
# pairs, the library's Trainer1D (Accelerate, an EMA, norm clipping, 2 accumulated batches).
steps, out = int(sys.argv[1]), sys.argv[2]
precision = sys.argv[3] if len(sys.argv) > 3 else ""
torch.manual_seed(0)
model = Unet1D(dim=16, dim_mults=(1, 2), channels=2)
diffusion = GaussianDiffusion1D(model, seq_length=32, timesteps=100, objective="pred_v")
t = torch.linspace(0, 6.28, 32)
phase = torch.rand(64, 1) * 6.28
seqs = torch.stack([torch.sin(t + phase), torch.cos(t + phase)], dim=1)
trainer = Trainer1D(diffusion, dataset=Dataset1D(seqs), train_batch_size=8, train_lr=8e-4, train_num_steps=steps,
                    gradient_accumulate_every=2, ema_decay=0.995, save_and_sample_every=steps, num_samples=4,
                    results_folder=out, amp=bool(precision), mixed_precision_type=precision or "fp16")
trainer.train()
"""


_A3C = '''"""minimalRL's a3c.py trained by one worker process (live_real).

a3c.py starts three training processes and a test process; one trainer keeps the run
reproducible (several race on the shared weights). The worker runs a3c.py's own train() on its
own ActorCritic, started as a3c.py starts it (the platform's start method: fork on Linux).
"""
import os

import torch
import torch.multiprocessing as mp

import a3c

if __name__ == "__main__":
    model = a3c.ActorCritic()
    model.share_memory()
    worker = mp.Process(target=a3c.train, args=(model, 1))
    worker.start()
    worker.join()
    torch.save(model.state_dict(), os.path.join(os.environ["LIVE_REAL_OUT"], "a3c.pt"))
'''


def _a3c_driver(where: Path) -> None:
    """live_real_a3c.py, the launcher above, beside a3c.py; and the gym of ``_gym``."""
    _gym(where)
    (where / "live_real_a3c.py").write_text(_A3C, encoding="utf-8")


def _ddpm_driver(where: Path) -> None:
    """live_real_ddpm1d.py: the driver above, beside the library it imports (the repository's
    root), since a library has no training script of its own."""
    (where / "live_real_ddpm1d.py").write_text(_DDPM_1D, encoding="utf-8")


_TABNET = """import sys

import numpy as np
import torch
from pytorch_tabnet.tab_model import TabNetClassifier

# A user's driver, as the library's README writes one: a classifier fitted on a table with an
# evaluation set, early stopping on its accuracy; here 1,600 rows of 12 features, 3 classes.
epochs, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
x = rng.standard_normal((2000, 12)).astype(np.float32)
y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int) + (x[:, 3] > 1).astype(int)
clf = TabNetClassifier(seed=0, verbose=5)
clf.fit(x[:1600], y[:1600], eval_set=[(x[1600:], y[1600:])], max_epochs=epochs, patience=10,
        batch_size=256, virtual_batch_size=64)
print("accuracy", (clf.predict(x[1600:]) == y[1600:]).mean())
torch.save(clf.network.state_dict(), out + "/tabnet.pt")
"""


def _tabnet_driver(where: Path) -> None:
    """live_real_tabnet.py: the driver above, beside the library it imports (the repository's
    root), since a library has no training script of its own."""
    (where / "live_real_tabnet.py").write_text(_TABNET, encoding="utf-8")

_PPE = """import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import pytorch_pfn_extras as ppe

# A user's driver, as the library's README and mnist_trainer.py write one: a model wrapped with
# its loss, create_trainer with an evaluator, here run every 30 iterations (mid-epoch).
epochs, out = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3))
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return F.log_softmax(self.head(self.body(x)), dim=1)


class ModelWithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, data, target):
        output = self.model(data)
        if self.training:
            loss = F.nll_loss(output, target)
            ppe.reporting.report({"train/loss": loss.item()})
            return {"loss": loss}
        return {"loss": F.nll_loss(output, target).item(), "output": output.argmax(dim=1, keepdim=True)}


centers = 2 * torch.randn(5, 16)
target = torch.randint(0, 5, (1600,))
data = centers[target] + torch.randn(1600, 16)
collate = ppe.dataloaders.utils.CollateAsDict(names=["data", "target"])
train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data[:1280], target[:1280]),
                                           batch_size=32, shuffle=True, collate_fn=collate)
val_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data[1280:], target[1280:]),
                                         batch_size=160, collate_fn=collate)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model_with_loss = ModelWithLoss(model)
trainer = ppe.engine.create_trainer(
    model_with_loss, optimizer, epochs,
    extensions=[ppe.training.extensions.LogReport(trigger=(30, "iteration")),
                ppe.training.extensions.PrintReport(["epoch", "iteration", "train/loss", "val/loss", "val/accuracy"])],
    evaluator=(ppe.engine.create_evaluator(
        model_with_loss, metrics=[ppe.training.metrics.AccuracyMetric("target", "output")],
        options={"eval_report_keys": ["loss", "accuracy"]}), (30, "iteration")),
    options={"train_report_keys": ["loss"]},
    out_dir=out,
)
ppe.to(model_with_loss, "cpu")
trainer.run(train_loader, val_loader)
torch.save(model.state_dict(), out + "/ppe.pt")
"""

_PKG_RESOURCES = '''"""What pytorch-pfn-extras 0.6 uses of pkg_resources (written by live_real.py): setuptools no
longer ships the module."""
import importlib.metadata
import types


def get_distribution(name):
    return types.SimpleNamespace(version=importlib.metadata.version(name))
'''


def _ppe_driver(where: Path) -> None:
    """live_real_ppe.py, the driver above, beside the library it imports (the repository's
    root), and live_real_pkg/pkg_resources.py for the library's version check."""
    (where / "live_real_ppe.py").write_text(_PPE, encoding="utf-8")
    (where / "live_real_pkg").mkdir(exist_ok=True)
    (where / "live_real_pkg" / "pkg_resources.py").write_text(_PKG_RESOURCES, encoding="utf-8")


_SB3 = """import sys

import torch
from stable_baselines3 import A2C, DQN, PPO

# A user's driver, as the library's README writes one: an agent for CartPole, learn(), its weights saved.
algo, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
make = {"ppo": lambda: PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, seed=0, device="cpu"),
        "a2c": lambda: A2C("MlpPolicy", "CartPole-v1", seed=0, device="cpu"),
        "dqn": lambda: DQN("MlpPolicy", "CartPole-v1", learning_starts=500, seed=0, device="cpu")}
model = make[algo]()
model.learn(total_timesteps=steps)
torch.save(model.policy.state_dict(), out + "/agent.pt")
"""


def _sb3_driver(where: Path) -> None:
    """live_real_sb3.py, the driver above, beside the library it imports (the repository's
    root), and the version file the library reads at import (the export writes *.py only)."""
    (where / "live_real_sb3.py").write_text(_SB3, encoding="utf-8")
    (where / "stable_baselines3" / "version.txt").write_text("2.9.0a4\n", encoding="utf-8")

_HELLO_DEEPSPEED = '''
import datasets

# wikitext-2 from the Hub, as the script asks for it, is the corpus written beside this file:
# the same datasets.Dataset type, its "text" column, with the empty lines it filters out.
def _load_dataset(path, name=None, split=None, **kwargs):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "wikitext.txt"), encoding="utf-8") as f:
        return datasets.Dataset.from_dict({"text": [line if line.strip() else "" for line in f]})


datasets.load_dataset = _load_dataset
'''


def _hello_deepspeed(where: Path) -> None:
    """live_real_hello/: a sitecustomize writing the weights at exit (``exit_state``) that
    answers ``datasets.load_dataset("wikitext", ...)`` with the corpus (wikitext.txt, an empty
    line between paragraphs, as wikitext has), and a RoBERTa-like word-level tokenizer of that
    corpus (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, as the script's model config expects), for
    DeepSpeed's HelloDeepSpeed MLM script, which downloads both."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = where / "live_real_hello"
    folder.mkdir(exist_ok=True)
    text = _corpus(600, seed=3)
    (folder / "wikitext.txt").write_text(text.replace(" .\n", " .\n\n"), encoding="utf-8")
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    words = sorted(set(text.split()))
    vocab = {w: i for i, w in enumerate(special + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>")
    fast.save_pretrained(folder / "tokenizer")
    (folder / "sitecustomize.py").write_text(_EXIT_STATE + _HELLO_DEEPSPEED, encoding="utf-8")


PREPARE: dict[str, Callable[[Path], None]] = {
    "words": _words, "nanogpt_chars": _nanogpt_chars, "sine_waves": _sine_waves,
    "names": _names, "text": _text, "chargpt_text": _chargpt_text, "torch_seed": _torch_seed,
    "gym": _gym, "exit_state": _exit_state, "seeded_exit_state": _seeded_exit_state, "vision": _vision, "image_folder": _image_folder,
    "ddpm_driver": _ddpm_driver, "tabnet_driver": _tabnet_driver, "sb3_driver": _sb3_driver, "ppe_driver": _ppe_driver, "a3c_driver": _a3c_driver, "cpu_accelerator": _cpu_accelerator,
    "cuda_as_cpu": _cuda_as_cpu, "carvana": _carvana,
    "hello_deepspeed": _hello_deepspeed, "cifar": _cifar, "har": _har,
    # pyGAT reads ./data/cora/ from where it runs, pygcn ../data/cora/ (it runs in pygcn/)
    "citations_here": lambda where: _citations(where / "data" / "cora"),
    "citations_above": lambda where: _citations(where.parent / "data" / "cora"),
    # pytorch/examples' gat reads ./cora/ and splits 1200 test and 400 validation nodes off first
    "citations_gat": lambda where: _citations(where / "cora", nodes=2000),
    "citations_gat_small": lambda where: _citations(where / "cora", nodes=1500),
}


# ---- one run ---------------------------------------------------------------------------------------
@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    cpu: float
    out: Path
    report: dict[str, Any] | None = None


def _run(case: Case, root: Path, observed: bool, scratch: Path, n: int = 1) -> Run:
    out = Path(tempfile.mkdtemp(dir=scratch))
    subst = {"{out}": str(out), "{root}": str(root)}

    def fill(s: str) -> str:
        for k, v in subst.items():
            s = s.replace(k, v)
        return re.sub(r"\{(\d+)n\}", lambda m: str(int(m.group(1)) * n), s)

    script = str(root / case.script)
    report = out / "traindoc.json"
    cmd = ([sys.executable, "-m", "traindoc", "run", "--json", str(report), script] if observed
           else [sys.executable, script]) + [fill(a) for a in case.args]
    if case.nproc > 1:  # torchrun: the same command with `-m` for a module, one process per rank
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(case.nproc)]
        cmd = launch + cmd[1:]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **{k: fill(v) for k, v in case.env.items()}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=root / case.cwd, env=env, capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = Run(proc.returncode, proc.stdout, proc.stderr, cpu, out)
    if observed and report.is_file():
        run.report = json.loads(report.read_text(encoding="utf-8"))
    return run


def _weights(state: str, case: Case, root: Path, run: Run) -> dict[str, Any]:
    import torch

    # Written a moment ago by the script itself, into our own scratch folder: trusted. A whole
    # pickled model needs the script's own modules (word_language_model's model.py).
    sys.path.insert(0, str(root / case.cwd))
    try:
        obj = torch.load(run.out / state, map_location="cpu", weights_only=False)
    finally:
        sys.path.remove(str(root / case.cwd))
    if case.key:
        obj = obj[case.key]
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


def _differences(case: Case, root: Path, bare: Run, seen: Run) -> list[str]:
    import torch

    diffs = []
    for state in [f"{case.state}.rank{r}" for r in range(case.nproc)] if case.nproc > 1 else [case.state]:
        if not state:
            continue
        a, b = _weights(state, case, root, bare), _weights(state, case, root, seen)
        if a.keys() != b.keys():
            diffs.append(f"{state}: the saved state's keys differ")
        diffs += [f"{state}: {k} differs" for k in a if k in b and not torch.equal(a[k], b[k])][:5]
    if case.lines:
        pattern = re.compile(case.lines)

        def picked(text: str) -> list[str]:
            return [m.group(0) for m in pattern.finditer(text)]

        left, right = picked(bare.stdout), picked(seen.stdout)
        if not left:
            diffs.append(f"no stdout line matches {case.lines!r}")
        elif left != right:
            first = next((i for i, (x, y) in enumerate(zip(left, right)) if x != y), min(len(left), len(right)))
            diffs.append(f"stdout line {first + 1} of the compared ones differs "
                         f"({len(left)} bare, {len(right)} observed)")
    return diffs


def _alarms(case: Case, run: Run) -> list[str]:
    if run.report is None:
        return ["no report written"]
    if run.report.get("run", {}).get("trained") is False:
        return ["no training observed"]  # training in processes traindoc did not follow
    found = [f for f in run.report.get("findings", []) if f.get("severity") in ("warning", "error")]
    return sorted({f"{f['id']}@{f.get('step')}" for f in found if f["id"] not in case.expect})


def _ratio(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}x" if xs else "-"


def chosen_cases(names: list[str] | None, mirrors: Path | None, checkouts: Path) -> list[Case]:
    """The manifest's cases (only ``names``, when given), their files first exported from the git
    directories under ``mirrors`` (when given). ValueError: a malformed manifest, a missing checkout."""
    try:
        cases = load_manifest(MANIFEST)
    except (OSError, TypeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(str(e)) from e
    if names:
        cases = [c for c in cases if c.name in names]
    if mirrors:
        export([Entry(c.repo, c.commit, c.script, older=c.older) for c in cases], mirrors, checkouts)
    # A library's case runs a driver its preparation writes: its checkout must be there.
    missing = sorted({c.folder for c in cases if not (checkouts / c.folder / c.script).is_file()
                      and not (c.prepare and (checkouts / c.folder).is_dir())})
    if missing:
        raise ValueError(f"no checkout of {', '.join(missing)} under {checkouts} (see --export)")
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkouts", type=Path, default=DEFAULT_CHECKOUTS)
    ap.add_argument("--export", type=Path, metavar="MIRRORS",
                    help="first write each listed commit's *.py files from the git directories under MIRRORS")
    ap.add_argument("--repeat", type=int, default=1, help="paired runs per case")
    ap.add_argument("--timing", action="store_true", help="also time each pair at three times its length")
    ap.add_argument("--case", action="append", help="only these cases (by name)")
    args = ap.parse_args(argv)
    try:
        cases = chosen_cases(args.case, args.export, args.checkouts)
    except ValueError as e:
        print(f"live_real: error: {e}", file=sys.stderr)
        return 2
    failed = False
    rows = ["| case | identical | false alarms | expected | CPU, whole run | CPU, per step |",
            "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="live_real_") as tmp:
        scratch = Path(tmp)
        for case in cases:
            root = args.checkouts / case.folder
            lacking = [m for m in case.needs if importlib.util.find_spec(m) is None]
            if lacking:
                rows.append(f"| {case.name} | not run: this Python lacks {', '.join(lacking)} | | | | |")
                print(rows[-1], file=sys.stderr)
                continue
            if case.prepare:
                PREPARE[case.prepare](root / case.cwd)
            whole, per_step, notes, alarms, expected = [], [], [], set(), set()
            for i in range(args.repeat):
                order = (False, True) if i % 2 == 0 else (True, False)  # alternate who runs first
                runs = {observed: _run(case, root, observed, scratch) for observed in order}
                bare, seen = runs[False], runs[True]
                if bare.rc or seen.rc:
                    notes.append(f"exit {bare.rc} bare, {seen.rc} observed: {(seen.stderr or bare.stderr)[-300:]}")
                    break
                notes += _differences(case, root, bare, seen)
                alarms.update(_alarms(case, seen))
                expected.update(f["id"] for f in (seen.report or {}).get("findings", []) if f["id"] in case.expect)
                if args.timing and case.longer > 1:
                    long = {observed: _run(case, root, observed, scratch, n=case.longer) for observed in order}
                    whole.append(long[True].cpu / long[False].cpu)
                    per_step.append((long[True].cpu - seen.cpu) / (long[False].cpu - bare.cpu))
                elif args.timing:  # its length is written in it: the judged pair is the whole run
                    whole.append(seen.cpu / bare.cpu)
            failed = failed or bool(notes or alarms)
            rows.append(f"| {case.name} | {'no: ' + '; '.join(notes) if notes else 'yes'} | "
                        f"{', '.join(sorted(alarms)) or 'none'} | {', '.join(sorted(expected)) or '-'} | "
                        f"{_ratio(whole)} | {_ratio(per_step)} |")
            print(rows[-1], file=sys.stderr)
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
