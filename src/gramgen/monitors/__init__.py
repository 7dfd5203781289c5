"""Monitor-guided decoding: static analysis in the decoding loop.

A grammar cannot know which names a repository defines; a static analyser can. A monitor
watches the document (the code before the cursor, then the generated text), and where a
trigger fires (``obj.``, ``from m import``, ``f(x, ``) it asks the analyser once for the
valid names and restricts the next tokens to those that continue into one::

    from gramgen.monitors import JediMonitor
    out = gramgen.generate(model, code_before_cursor, chat=False, max_new_tokens=32,
                           monitors=[JediMonitor(project="path/to/repo")])
    out.stats.monitor_queries, out.stats.monitor_fallbacks

With a grammar (``grammar=``, ``lark=``, ...) the masks are ANDed; without one the
monitors are the only constraint. Every sampler but ``"asap"`` takes monitors.

The pieces, each in its own module:

* :mod:`.base`: the :class:`Monitor` protocol (a :class:`Scanner` that fires triggers,
  ``names(trigger)``), :class:`TriggerKind`, :class:`Trigger`, :class:`MonitorStats`;
* :mod:`.names`: the names' mask, by the rules (a)/(b) of monitor-guided decoding,
  computed by walking the token trie against the name trie (:class:`NameSet`);
* :mod:`.state`: one monitor over one sequence (bytes fed one character at a time, so
  a trigger can fire inside a token);
* :mod:`.constraint`: monitors as a :class:`~gramgen.generation.Constraint`, conjoined
  with any other (:func:`monitored`, :class:`MonitoredConstraint`, :class:`Unconstrained`);
* :mod:`.python`: the Python scanner (what ``tokenize`` knows, incrementally);
* :mod:`.jedi_monitor`: :class:`JediMonitor`, the Python monitor backed by jedi.
"""

from .base import Monitor, MonitorStats, Scanner, Trigger, TriggerKind, check_monitors
from .constraint import (MaskedMonitoredConstraint, MonitoredConstraint, Unconstrained, monitored,
                         prompt_document)
from .jedi_monitor import TRIGGERS, JediMonitor
from .names import NameSet, name_set
from .python import PythonScanner, python_kinds
from .state import MonitorState, Session

__all__ = [
    "JediMonitor", "MaskedMonitoredConstraint", "Monitor", "MonitorState", "MonitorStats",
    "MonitoredConstraint", "NameSet", "PythonScanner", "Scanner", "Session", "TRIGGERS", "Trigger",
    "TriggerKind", "Unconstrained", "check_monitors", "monitored", "name_set", "prompt_document",
    "python_kinds",
]
