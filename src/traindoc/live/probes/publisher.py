"""Named scalars the script logs or prints, and values probes measure by name (router load),
turned into ``Scalar`` events: who owns a signal, and in which order values are emitted.

``loss`` and ``grad_norm`` are measured live, so logged ones are kept as ``metric.<name>``; so
are ``expert_gini``/``expert_entropy`` once a router is watched; otherwise the first logged name
that maps to a signal owns it and another name for the same signal (the same loss logged to
TensorBoard and to a CSV) becomes ``metric.<name>``. One Publisher per session, shared by the
probes that emit named scalars (metrics, printed metrics, evaluation metrics, routers).
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from typing import Any, Iterable, Mapping

import torch

from traindoc.events import Event, Scalar
from traindoc.live.session import Session

# Signals the live face measures itself: logged copies are kept as metrics.
LIVE_SIGNALS = frozenset({"loss", "grad_norm", "lr"})
# Channels whose names may be anything (a CSV's columns, printed text): names the heuristics do
# not recognize are left out there instead of becoming ``metric.<name>``.
_LOOSE = ("csv:", "stdout")

_publishers: "weakref.WeakKeyDictionary[Session, Publisher]" = weakref.WeakKeyDictionary()


def publisher(session: Session) -> "Publisher":
    """The one Publisher of a session (shared by the probes that emit named scalars)."""
    pub = _publishers.get(session)
    if pub is None:
        pub = _publishers[session] = Publisher(session)
    return pub


class Publisher:
    """Maps logged names to signals, decides who owns a signal, and emits Scalars in the order
    they were logged (a value on an accelerator waits for the batched transfer; later values
    wait behind it)."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self._owner: dict[str, tuple[str, str]] = {}
        self._claimed: set[str] = set()
        self._maps: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
        self._queue: deque[list[Any]] = deque()  # [step, signal, value or None while pending]

    def claim(self, signal: str) -> None:
        """A probe measures ``signal`` itself: logged values of it become metrics."""
        self._claimed.add(signal)

    def signals(self, channel: str, names: tuple[str, ...]) -> dict[str, str]:
        """name -> signal, as ``traindoc logs`` maps a log's columns. Names the heuristics do not
        recognize become ``metric.<name>`` (they were logged as metrics), except in a CSV file,
        whose columns may be anything (ids, predictions), and in printed text: there they are
        left out."""
        key = (channel, names)
        found = self._maps.get(key)
        if found is None:
            from traindoc.sources.logs import mapping

            resolved = mapping.resolve(list(names)).signal_of
            found = {}
            for name in names:
                if name in resolved:
                    found[name] = resolved[name]
                elif (not channel.startswith(_LOOSE) and name not in mapping.resolve([name]).ignored
                      and mapping.words(name)):
                    found[name] = "metric." + "_".join(mapping.words(name))
            if len(self._maps) < 4096:
                self._maps[key] = found
        return found

    def publish(self, channel: str, values: Mapping[str, Any], step: int | None = None) -> None:
        """``values`` logged on ``channel`` at ``step`` (default: the current step)."""
        names = tuple(k for k in values if isinstance(k, str))
        if not names:
            return
        mapped = self.signals(channel, names)
        step = self.s.clock.current_step if step is None else step
        for name in names:
            signal = mapped.get(name)
            if signal is not None:
                self._put(step, self._route(channel, name, signal), values[name])

    def _route(self, channel: str, name: str, signal: str) -> str:
        if "." in signal:  # metric.* and loss_term.*: many may coexist
            return signal
        owner = self._owner.setdefault(signal, (channel, name))
        if signal in LIVE_SIGNALS or signal in self._claimed or owner != (channel, name):
            return _metric_name(name, signal)
        return signal

    def _put(self, step: int, signal: str, raw: Any) -> None:
        if isinstance(raw, bool) or raw is None:
            return
        if isinstance(raw, torch.Tensor):
            if raw.numel() != 1 or raw.is_complex():
                return
            if raw.device.type != "cpu":
                entry = [step, signal, None]
                self._queue.append(entry)
                # Read with the session's one batched transfer, not here (no sync).
                self.s.defer(raw.detach().reshape(1), functools.partial(self._resolve, entry))
                return
            value = float(raw.item())
        else:
            try:
                value = float(raw.item() if hasattr(raw, "item") else raw)
            except (TypeError, ValueError, AttributeError):
                return
        if self._queue:
            self._queue.append([step, signal, value])
        else:
            self.s.emit(Scalar(step=step, name=signal, value=value))

    def _resolve(self, entry: list[Any], vals: list[float]) -> Iterable[Event]:
        entry[2] = vals[0]
        out = []
        while self._queue and self._queue[0][2] is not None:
            step, signal, value = self._queue.popleft()
            out.append(Scalar(step=step, name=signal, value=value))
        return out

    def derived(self, step: int, signal: str, value: float) -> None:
        """A value traindoc derived itself (an evaluation's accuracy from the loss's inputs):
        emitted as ``signal`` unless the script logs that signal itself, whose values then
        stand alone. It never takes ownership: a log that names the signal later wins."""
        if signal not in self._owner:
            self._put(step, signal, value)


@functools.lru_cache(maxsize=1024)
def _metric_name(name: str, signal: str) -> str:
    """``metric.<name>`` for a logged name that does not own its signal (read once per name:
    a value logged every step pays a dict lookup)."""
    from traindoc.sources.logs import mapping

    return "metric." + ("_".join(mapping.words(name)) or signal)


__all__ = ["LIVE_SIGNALS", "Publisher", "publisher"]
