"""From a log's column (or tag, or key) names to traindoc's signal names.

The heuristics read a name as words (``Train_Loss`` -> train, loss; ``valAcc`` -> val, acc;
``lr-AdamW`` -> lr, adam, w) and look for a *split* (train / val / test), a *quantity* (loss,
acc, f1, lr, grad norm ...) and a Lightning-style aggregation suffix (``_step``/``_epoch``). The
table in docs/logs.md lists them; tests/logs/test_mapping.py holds every row of it.

What is not recognized is never guessed: it is listed as unmapped, and ``--map signal=column``
maps it. Bookkeeping columns (epoch, runtime, FLOPs ...) are known and skipped quietly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from traindoc.errors import UsageError
from traindoc.events.metrics import COLLAPSE_WORDS, ERROR_WORDS

# Signals a column can be mapped to by name (the shared detectors consume these).
CANONICAL: tuple[str, ...] = (
    "loss", "lr", "grad_norm", "val_loss", "train_acc", "val_acc", "train_f1", "val_f1",
    "expert_gini", "expert_entropy", "throughput", "val_classes",
)
# expert_load.K (expert_load.GROUP.K per MoE layer): one expert's share of the tokens.
PREFIXES: tuple[str, ...] = ("loss_term.", "metric.", "expert_load.")
# Names that can carry the x axis, best first.
STEP_NAMES: tuple[str, ...] = ("step", "global_step", "globalstep", "_step", "iteration", "iter",
                               "it", "trainer/global_step", "train/global_step")
EPOCH_NAMES: tuple[str, ...] = ("epoch", "epochs", "_epoch", "train/epoch")

_TRAIN = {"train", "training", "tr", "trn"}
_VAL = {"val", "valid", "validation", "eval", "evaluation", "dev"}
_TEST = {"test", "testing"}
_AGG = {"step", "epoch"}  # Lightning's on_step/on_epoch suffixes
_LOSS = {"loss", "losses"}
_ACC = {"acc", "accuracy", "top1"}
_F1 = {"f1", "f1score", "fscore"}
_LR = {"lr", "learningrate"}
_GRAD = {"grad", "grads", "gradient", "gradients"}
_NORM = {"norm", "l2"}
_ROUTER = {"expert", "experts", "router", "routing", "moe", "gate", "gating", "load"}
# One expert's load: a load word and the expert's number (expert_3_load, moe/frac_e3, load_e3).
_LOAD = {"load", "loads", "frac", "fraction", "share", "usage", "util", "utilization", "tokens", "count",
         "counts", "prob", "probs", "density"}
_EXPERT_NO = re.compile(r"(?:e|expert)(\d+)")
# A class count (num_classes, n_classes, numLabels): the C of chance accuracy 1/C.
_CLASSES = {"classes", "nclasses", "numclasses", "labels", "numlabels"}
_COUNT = {"num", "n", "number", "of", "total"}
# Words of scores where higher is better (never guessed to be a loss term either).
SCORE_WORDS = {"auc", "auroc", "ap", "map", "precision", "prec", "recall", "iou", "miou", "dice",
               "bleu", "rouge", "top5", "r2", "spearman", "pearson", "corr", "kappa", "f2",
               "sparsity", "score", "reward", "return", "sharpness"}
# Bookkeeping: known, not a training signal, skipped quietly.
_BOOKKEEPING = {"epoch", "epochs", "step", "steps", "globalstep", "iteration", "iter", "time",
                "timestamp", "walltime", "runtime", "flos", "totalflos", "seconds", "second",
                "minutes", "hours", "date", "elapsed", "duration", "memory", "mem", "seen",
                "samples", "tokens", "batch", "batches", "rank", "pg"}
_NOT_LR = {"momentum", "beta", "beta1", "beta2", "wd", "decay", "weight"}
# Summaries of a quantity (W&B exports write train/loss__MIN): the mean is still the quantity,
# ranked after the plain column; extremes and spreads are metrics of their own.
_MEAN = {"mean", "avg", "average", "smoothed", "smooth", "ema", "running"}
_SPREAD = {"min", "max", "std", "var", "sum", "p50", "p90", "p95", "p99", "median"}

_SPLIT_RE = re.compile(r"[^0-9A-Za-z]+")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[a-z])(?=[A-Z])")


def words(name: str) -> list[str]:
    """``Train_Loss`` -> [train, loss]; ``valAcc`` -> [val, acc]; ``lr-AdamW/pg1`` -> [lr, adam,
    w, pg1]; ``learning_rate`` -> [learningrate] (a few two-word terms are joined)."""
    out: list[str] = []
    for part in _SPLIT_RE.split(name):
        if part:
            out.extend(w.lower() for w in _CAMEL_RE.split(part) if w)
    text = " ".join(out)
    for a, b in (("learning rate", "learningrate"), ("f1 score", "f1score"), ("global step", "globalstep"),
                 ("grad norm", "gradnorm"), ("total flos", "totalflos"), ("wall time", "walltime"),
                 ("f 1", "f1"), ("top 1", "top1"), ("top 5", "top5")):
        text = re.sub(rf"\b{a}\b", b, text)
    return text.split()


@dataclass(frozen=True)
class Guess:
    """What a name looks like. ``signal`` is None for unknown and bookkeeping names; ``rank``
    orders candidates for the same signal (lower wins)."""

    signal: str | None
    rank: int = 0
    bookkeeping: bool = False


def _slug(ws: list[str]) -> str:
    return "_".join(ws) or "value"


def guess(name: str) -> Guess:
    """The heuristic reading of one name (see the table in docs/logs.md)."""
    ws = words(name)
    if not ws:
        return Guess(None)
    s = set(ws)
    split = "val" if s & _VAL else "test" if s & _TEST else "train" if s & _TRAIN else ""
    rest = [w for w in ws if w not in _TRAIN | _VAL | _TEST]
    agg = rest[-1] if len(rest) > 1 and rest[-1] in _AGG else ""
    core = rest[:-1] if agg else rest
    # Lightning's _step rows are per step: best for the step axis; _epoch rows are averages.
    agg_rank = {"step": 0, "": 1, "epoch": 2}[agg]
    cs = set(core)

    if name.lower() in ("loss", "lr", "grad_norm"):
        return Guess(name.lower(), -1)
    if cs & _SPREAD and cs & (_LOSS | _ACC | _F1 | _LR | {"gradnorm"}):
        return Guess(f"metric.{_slug(ws)}")
    if cs & _MEAN:
        core = [w for w in core if w not in _MEAN]
        cs = set(core)
        agg_rank += 3
    if cs & _LR and not cs & _NOT_LR and split in ("", "train"):
        # lr-AdamW, lr-AdamW/pg1, learning_rate: the first parameter group wins.
        pg = [w for w in core if re.fullmatch(r"pg\d+", w)]
        return Guess("lr", int(pg[0][2:]) if pg else 0)
    if ("gradnorm" in cs or (cs & _GRAD and cs & _NORM) or "gnorm" in cs or
            ("total" in cs and "norm" in cs)) and split in ("", "train"):
        post = bool(cs & {"clipped", "clip", "after", "post"}) and not cs & {"pre", "unclipped", "before"}
        return Guess("grad_norm", 2 if post else (0 if cs & {"pre", "unclipped", "before"} else 1))
    if cs & _CLASSES and cs <= _CLASSES | _COUNT:
        return Guess("val_classes")
    load = _expert_load(core)
    if load:
        return Guess(load)
    if "gini" in cs:
        return Guess("expert_gini", 0 if cs & _ROUTER else 1)
    if "entropy" in cs and cs & _ROUTER:
        return Guess("expert_entropy")
    if COLLAPSE_WORDS <= cs:
        return Guess(f"metric.{_slug(ws)}")  # representation-collapse reads it
    if "throughput" in cs or (("per" in cs and cs & {"second", "sec", "s"}) and
                              cs & {"samples", "sample", "tokens", "token", "tok", "examples", "images", "img"}) or \
            cs & {"tps", "sps", "its"}:
        if split in ("", "train"):
            return Guess("throughput", agg_rank)
        return Guess(None, bookkeeping=True)
    if cs & _BOOKKEEPING and not cs & (_LOSS | _ACC | _F1 | ERROR_WORDS | SCORE_WORDS):
        return Guess(None, bookkeeping=True)
    if cs & _LOSS:
        qual = [w for w in core if w not in _LOSS]
        if not qual:
            if split == "val":
                return Guess("val_loss", agg_rank)
            if split == "test":
                return Guess(f"metric.{_slug(words(name))}")
            return Guess("loss", agg_rank)
        if split in ("", "train") and not agg:
            return Guess(f"loss_term.{_slug(qual)}")
        return Guess(f"metric.{_slug(ws)}")
    if cs & _ACC and len(core) <= 2 and split != "test":
        return Guess("val_acc" if split == "val" else "train_acc", agg_rank)
    if cs & _F1 and len(core) <= 2 and split != "test":
        return Guess("val_f1" if split == "val" else "train_f1", agg_rank)
    if cs & (ERROR_WORDS | SCORE_WORDS | _ACC | _F1):
        return Guess(f"metric.{_slug(ws)}")
    if split in ("val", "test") and len("".join(core)) >= 2:
        return Guess(f"metric.{_slug(ws)}")  # an evaluation quantity
    return Guess(None)


def _expert_load(core: list[str]) -> str | None:
    """``expert_load.K`` (``expert_load.GROUP.K``) for one expert's load, None otherwise."""
    number, rest = None, []
    for i, w in enumerate(core):
        m = _EXPERT_NO.fullmatch(w)
        if number is None and (m or (w.isdigit() and i > 0 and core[i - 1] in ("expert", "experts", "e"))):
            number = m.group(1) if m else w
        else:
            rest.append(w)
    if number is None or not set(rest) & _LOAD:
        return None
    group = [w for w in rest if w not in _ROUTER | _LOAD | {"e", "per"}]
    return ".".join(["expert_load", *(["_".join(group)] if group else []), str(int(number))])


@dataclass
class Mapping:
    """The resolved mapping of one log: column -> signal, and what was left out. ``explicit``:
    the columns mapped by --map; ``units``: column -> "percent" or "fraction" for accuracies,
    with ``unit_why`` saying how each was told."""

    signal_of: dict[str, str] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    explicit: list[str] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    unit_why: dict[str, str] = field(default_factory=dict)

    def column_of(self, signal: str) -> str | None:
        for col, sig in self.signal_of.items():
            if sig == signal:
                return col
        return None


def parse_overrides(texts: list[str] | None) -> dict[str, str]:
    """``--map loss=Train_Loss,lr=LR`` (repeatable) -> {"loss": "Train_Loss", "lr": "LR"}.

    Signals: the canonical names, ``loss_term.NAME``, ``metric.NAME``, ``step``/``epoch`` (the x
    column) and ``ignore`` (a column to skip: ``ignore=Level``)."""
    out: dict[str, str] = {}
    for text in texts or ():
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            sig, eq, col = item.partition("=")
            sig, col = sig.strip(), col.strip()
            if not eq or not sig or not col:
                raise UsageError(f"--map {item!r}: expected signal=column, e.g. --map loss=Train_Loss")
            if not (sig in CANONICAL or sig in ("step", "epoch", "ignore")
                    or any(sig.startswith(p) and len(sig) > len(p) for p in PREFIXES)):
                import difflib

                close = difflib.get_close_matches(sig, [*CANONICAL, "step", "epoch", "ignore"], n=1)
                hint = f" Did you mean {close[0]}?" if close else ""
                raise UsageError(
                    f"--map {item!r}: unknown signal {sig!r}; use one of {', '.join(CANONICAL)}, "
                    f"loss_term.NAME, metric.NAME, step, epoch or ignore.{hint}")
            key = f"ignore:{col}" if sig == "ignore" else sig
            if key in out and out[key] != col:
                raise UsageError(f"--map maps {sig} twice ({out[key]} and {col}); keep one")
            out[key] = col
    return out


def resolve(columns: list[str], overrides: dict[str, str] | None = None) -> Mapping:
    """Map numeric ``columns`` (file order) to signals: explicit overrides first, then the
    heuristics; each signal gets one column (the best-ranked; the others become metrics)."""
    overrides = overrides or {}
    m = Mapping()
    explicit = {col: sig for sig, col in overrides.items()
                if not sig.startswith("ignore:") and sig not in ("step", "epoch")}
    skip = {col for key, col in overrides.items() if key.startswith("ignore:")}
    taken = set(explicit.values())
    best: dict[str, tuple[int, int, str]] = {}  # signal -> (rank, position, column)
    loose: dict[str, str] = {}
    for pos, col in enumerate(columns):
        if col in skip:
            m.ignored.append(col)
            continue
        if col in explicit:
            m.signal_of[col] = explicit[col]
            m.explicit.append(col)
            continue
        g = guess(col)
        if g.bookkeeping:
            m.ignored.append(col)
        elif g.signal is None:
            m.unmapped.append(col)
        elif g.signal in CANONICAL:
            if g.signal in taken:
                loose[col] = f"metric.{_slug(words(col))}"
                continue
            old = best.get(g.signal)
            if old is None or (g.rank, pos) < old[:2]:
                if old is not None:
                    loose[old[2]] = f"metric.{_slug(words(old[2]))}"
                best[g.signal] = (g.rank, pos, col)
            else:
                loose[col] = f"metric.{_slug(words(col))}"
        else:
            loose[col] = g.signal
    for sig, (_, _, col) in best.items():
        m.signal_of[col] = sig
    for col, sig in loose.items():
        m.signal_of[col] = sig
    _loss_terms(columns, m)
    # Keep file order, and make metric names unique (two columns may slug alike).
    used: set[str] = set()
    ordered: dict[str, str] = {}
    for col in columns:
        if col in m.signal_of:
            sig = m.signal_of[col]
            base, n = sig, 2
            while sig in used:
                sig, n = f"{base}_{n}", n + 1
            used.add(sig)
            ordered[col] = sig
    m.signal_of = ordered
    for sig in CANONICAL:
        also = [c for c, s in loose.items() if s.startswith("metric.") and guess(c).signal == sig]
        chosen = m.column_of(sig)
        if chosen and also:
            m.notes.append(f"{sig}: using {chosen}; also matched {', '.join(also)} (kept as metrics)")
    return m


def _loss_terms(columns: list[str], m: Mapping) -> None:
    """``Train_Delta`` next to ``Train_Loss``: a column sharing the training loss's prefix is a
    term of that loss when its own name is a word (two characters or more) and not a known
    quantity. A one-letter name (``Train_H``) says too little and stays unmapped."""
    loss_col = m.column_of("loss")
    if loss_col is None:
        return
    ws = words(loss_col)
    if len(ws) != 2 or ws[1] not in _LOSS:
        return
    prefix = ws[0]
    for col in list(m.unmapped):
        cw = words(col)
        if len(cw) == 2 and cw[0] == prefix and len(cw[1]) >= 2:
            m.unmapped.remove(col)
            m.signal_of[col] = f"loss_term.{cw[1]}"


ACCURACY_SIGNALS = ("train_acc", "val_acc")


def infer_units(m: Mapping, peaks: dict[str, float]) -> None:
    """Tell percent from fraction for the accuracy columns, from their range: a column whose
    largest value is above 1 is in percent. A column that never exceeds 1 is in percent too
    when another accuracy column of the same log is (one logger writes one unit; seed 004's
    validation accuracy stuck at 0.10 meant 0.1%, next to a training accuracy of 69), and a
    fraction otherwise. ``peaks``: column -> its largest finite value."""
    cols = [c for c, sig in m.signal_of.items() if sig in ACCURACY_SIGNALS and c in peaks]
    over = [c for c in cols if peaks[c] > 1.0]
    for col in cols:
        peak = f"{peaks[col]:.4g}"
        if col in over:
            m.units[col], m.unit_why[col] = "percent", f"values up to {peak}"
        elif over:
            m.units[col] = "percent"
            m.unit_why[col] = f"up to {peak}, read as {over[0]}, which reaches {peaks[over[0]]:.4g}"
        else:
            m.units[col], m.unit_why[col] = "fraction", f"values up to {peak}"
