"""The monitor protocol: what a language and its static analyser provide.

A :class:`Monitor` supplies two things; everything else (feeding the text byte by byte,
caching, masks, statistics) is the machinery of :mod:`.state` and :mod:`.constraint`:

* a :class:`Scanner`, the lexical state of the document, fed one character at a time,
  which says when a trigger fires (the cursor is then just after that character);
* ``names(trigger)``: the names valid at a trigger (one static-analysis query), or None
  when the analyser knows nothing there (then nothing is restricted).

A trigger's :class:`TriggerKind` says how its names restrict the text that follows (a
mode of :mod:`.names`) and whether the monitor may ask about a trigger that a candidate
token would fire in its middle (``lookahead``, see :class:`~gramgen.monitors.state.MonitorState`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import ConfigurationError
from .names import MODES

__all__ = ["Monitor", "MonitorStats", "Scanner", "Trigger", "TriggerKind", "check_monitors"]


@dataclass(frozen=True)
class TriggerKind:
    """A kind of trigger. ``name`` is what configuration calls it (``"member"``);
    ``mode`` how the names restrict what follows (``"member"``, ``"optional"`` or
    ``"keyword"``, see :mod:`gramgen.monitors.names`); ``lookahead``: query the analyser
    for a trigger that a token fires with more bytes after it (``.app`` after ``obj``)
    instead of refusing the identifiers such a token would start unchecked."""

    name: str
    mode: str = "member"
    lookahead: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigurationError(f"unknown trigger mode {self.mode!r}: use one of {', '.join(MODES)}")


@dataclass(frozen=True)
class Trigger:
    """A trigger that fired: its kind and the document up to the cursor (just after the
    character that fired it)."""

    kind: TriggerKind
    text: str


@runtime_checkable
class Scanner(Protocol):
    """The lexical state of a document, one character at a time."""

    def feed(self, char: str) -> TriggerKind | None:
        """Advance by ``char``; the kind of the trigger that fires right after it, or None."""
        ...

    def copy(self) -> Scanner:
        """An independent copy (forks of a sequence scan on their own)."""
        ...


@runtime_checkable
class Monitor(Protocol):
    """Static analysis in the decoding loop (see the module docstring)."""

    def scanner(self) -> Scanner:
        """A scanner at the start of a document."""
        ...

    def names(self, trigger: Trigger) -> Iterable[str] | None:
        """The names valid at ``trigger``; None when nothing is known there. May raise:
        the machinery then restricts nothing at this trigger and counts a failure."""
        ...


@dataclass
class MonitorStats:
    """What the monitors of one sequence did (shared by its forks: SMC particles, drafts)."""

    #: triggers reached in the document and the text generated after it
    triggers: int = 0
    #: static-analysis queries made (a trigger met again is answered from the cache)
    queries: int = 0
    query_seconds: float = 0.0
    #: queries that raised or timed out: nothing was restricted there
    failures: int = 0
    #: states where the monitors and the constraint together allowed nothing, so the
    #: monitors were set aside (the constraint's mask alone was used)
    fallbacks: int = 0
    #: the message of the last failure
    last_failure: str | None = None

    def report(self, stats) -> None:
        """Add these counts to a :class:`~gramgen.GenerationStats` (``monitor_*``)."""
        stats.monitor_triggers += self.triggers
        stats.monitor_queries += self.queries
        stats.monitor_query_seconds += self.query_seconds
        stats.monitor_failures += self.failures
        stats.monitor_fallbacks += self.fallbacks


def check_monitors(monitors) -> tuple[Monitor, ...]:
    """``monitors`` as a tuple, or a :class:`~gramgen.ConfigurationError` naming what is
    not a monitor."""
    if monitors is None:
        return ()
    if isinstance(monitors, (str, bytes)) or not isinstance(monitors, Iterable):
        raise ConfigurationError(f"monitors= takes a list of monitors (e.g. [JediMonitor()]), "
                                 f"not {type(monitors).__name__}")
    out = tuple(monitors)
    for i, monitor in enumerate(out):
        if not isinstance(monitor, Monitor):
            raise ConfigurationError(f"monitors[{i}] is a {type(monitor).__name__}, not a monitor: "
                                     "it needs scanner() and names(trigger) (see gramgen.monitors.Monitor)")
    return out
