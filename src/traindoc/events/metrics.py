"""What a metric is, by its name: the words that make a ``metric.*`` signal an error (lower is
better) or a score of a decision threshold. Log readers map columns with them and detectors
choose the metrics they judge with them, so a metric means the same whichever face saw it."""

from __future__ import annotations

# Words of quantities a model is judged by where lower is better (never guessed to be a loss term).
ERROR_WORDS = frozenset({
    "mae", "mse", "rmse", "shd", "err", "error", "errors", "nll", "ppl", "perplexity", "wer", "cer",
    "hamming", "distance", "dist", "mape", "smape", "bpc", "bpb",
})
# A self-supervised model's collapse level, as its users name it (lightly's tutorials: "Collapse Level").
COLLAPSE_WORDS = frozenset({"collapse", "level"})
# Scores of a decision threshold: exactly 0 when no prediction crosses it (degenerate-threshold).
THRESHOLD_WORDS = frozenset({"precision", "prec", "recall", "f1", "f1score", "fscore", "f2", "sensitivity", "tpr"})


def metric_words(signal: str) -> frozenset[str]:
    """The words of a ``metric.*`` signal's name (``metric.val_mae``: val, mae); none for the
    other signals, which have fixed meanings."""
    return frozenset(signal[len("metric."):].split("_")) if signal.startswith("metric.") else frozenset()


def error_metric(signal: str) -> bool:
    """A metric where lower is better and a rise by an order of magnitude is a failure (a loss
    is left to the loss detectors)."""
    words = metric_words(signal)
    return bool(words & ERROR_WORDS) and "loss" not in words


def thresholded_metric(signal: str) -> bool:
    """A precision, recall or F-score under a name of the script's own."""
    return bool(metric_words(signal) & THRESHOLD_WORDS)


def collapse_metric(signal: str) -> bool:
    """A self-supervised model's collapse level as its users log it (``collapse_level``:
    1 - sqrt(D) * the std of the l2-normalized outputs, 0 spread over the sphere, 1 one point)."""
    return COLLAPSE_WORDS <= metric_words(signal)
