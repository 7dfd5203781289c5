"""A monitor for Python: triggers from :class:`~.python.PythonScanner`, names from jedi.

One jedi query per trigger: ``Script(text, path=, project=).complete(line, column)`` for
member access and imports, ``get_signatures`` for keyword arguments, with the document up
to the cursor as the text (the code after it is not needed). One ``jedi.Project`` per
root is made in the process and reused, so jedi's caches stay warm across triggers,
sequences, calls and monitors; every jedi call runs on one thread (jedi is not
thread-safe), which is also what makes a query's ``timeout`` possible. A monitor remembers
the names it found per text as long as it lives: make a new one when the repository's
files change (an editor does per request; the project stays warm).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import inspect
import os
import queue
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigurationError
from .base import Trigger
from .python import PythonScanner, python_kinds

__all__ = ["JediMonitor", "TRIGGERS"]

#: the trigger kinds a JediMonitor knows, by the name ``triggers=`` takes
TRIGGERS = ("member", "import", "keyword")
#: jedi completion types that are names of something (not keywords, file paths, or the
#: ``name=`` parameters jedi offers inside a call)
NAME_TYPES = frozenset({"module", "class", "instance", "function", "property", "statement"})
_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_SELF_DOT = re.compile(r"(?<![\w.])(?:self|cls)\s*\.\Z")
#: the jedi projects made, by root (read and written on the jedi thread only); the thread
#: that runs every jedi call; the lock that makes it
_PROJECTS: dict = {}
_WORKER: _Worker | None = None
_LOCK = threading.Lock()


class _Worker:
    """One daemon thread that runs every jedi call of the process in order (jedi is not
    thread-safe; a call that timed out runs to its end and the next waits for it; the
    process never waits for it at exit)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="gramgen-jedi", daemon=True).start()

    def _run(self) -> None:
        while True:
            future, fn = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)

    def submit(self, fn) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, fn))
        return future


class JediMonitor:
    """Monitor-guided decoding for Python with jedi: ``generate(..., monitors=[JediMonitor()])``.

    Parameters
    ----------
    project:
        The repository root (a path or a ``jedi.Project``), so that names defined in
        other files of the repository count. None: jedi's default project for ``path``
        (or the working directory).
    path:
        The file the document is (for relative imports and the project's layout); None
        for an unsaved buffer.
    timeout:
        Seconds one query may take; past it the trigger is left unrestricted and the
        failure is counted in the stats (jedi's first query in a process loads its stubs
        and can take a few seconds: call :meth:`warm` first). None: no limit.
    strict:
        True: restrict wherever jedi names something. False: leave a member access free
        where jedi's list is likely incomplete: objects with ``__getattr__``, and
        ``self.`` / ``cls.`` (where methods create new attributes).
    triggers:
        Which triggers to use, from ``"member"`` (``obj.``), ``"import"`` (``from m import``,
        ``import a.b``), ``"keyword"`` (``f(x, key=``).
    lookahead:
        Also ask jedi about a member access that a candidate token would open and
        continue (``.app`` after ``obj``, a token some tokenizers have) instead of refusing
        such tokens' names (the model then writes ``.`` and the name apart). Exact, but a
        query at every step after an expression: slow.
    """

    def __init__(self, project=None, path=None, *, timeout: float | None = 5.0, strict: bool = True,
                 triggers: Iterable[str] = TRIGGERS, lookahead: bool = False):
        if importlib.util.find_spec("jedi") is None:
            raise ConfigurationError("JediMonitor needs jedi: pip install 'gramgen[monitors]'")
        if isinstance(triggers, str) or not isinstance(triggers, Iterable):
            raise ConfigurationError(f"triggers must be a list of trigger names from {', '.join(TRIGGERS)}, "
                                     f"not {triggers!r}")
        triggers = tuple(triggers)
        unknown = [t for t in triggers if t not in TRIGGERS]
        if unknown:
            raise ConfigurationError(f"unknown trigger kind {unknown[0]!r}: JediMonitor knows "
                                     f"{', '.join(TRIGGERS)}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise ConfigurationError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
        for name, value in (("strict", strict), ("lookahead", lookahead)):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{name} must be True or False, not {value!r}")
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ConfigurationError(f"path must be a file path or None, not {type(path).__name__}")
        if project is not None and isinstance(project, (str, os.PathLike)) and not Path(project).is_dir():
            raise ConfigurationError(f"project must be a directory (the repository root): {project!s} is not one")
        if project is not None and not isinstance(project, (str, os.PathLike)) and not hasattr(project, "path"):
            raise ConfigurationError(f"project must be a directory or a jedi.Project, not {type(project).__name__}")
        self.project_root = project
        self.path = None if path is None else str(path)
        self.timeout = timeout
        self.strict = strict
        self.triggers = triggers
        self.lookahead = lookahead
        kinds = python_kinds(lookahead)
        self._kinds = {name: kinds[name] for name in triggers}
        self._project = None

    def __repr__(self) -> str:
        return (f"JediMonitor(project={self.project_root!r}, path={self.path!r}, timeout={self.timeout!r}, "
                f"strict={self.strict!r}, triggers={self.triggers!r})")

    # -- the Monitor protocol -----------------------------------------------------------------

    def scanner(self) -> PythonScanner:
        return PythonScanner(self._kinds)

    def names(self, trigger: Trigger) -> set[str] | None:
        """The names jedi finds at ``trigger`` (None: it knows nothing there, or, with
        ``strict=False``, its list may be incomplete). Raises TimeoutError past ``timeout``
        and whatever jedi raises."""
        return self._call(lambda: self._names(trigger))

    # -- jedi ---------------------------------------------------------------------------------

    def _call(self, fn, timeout: float | None | bool = True):
        """Run ``fn`` on the jedi thread and wait for it (``timeout``: this monitor's)."""
        global _WORKER
        timeout = self.timeout if timeout is True else timeout
        with _LOCK:
            if _WORKER is None:
                _WORKER = _Worker()
            future = _WORKER.submit(fn)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"jedi gave no answer within {timeout} s") from None

    def project(self):
        """The ``jedi.Project``: one per root in the process, shared by every monitor on
        it (a monitor made per request still finds it warm)."""
        if self._project is None:
            import jedi

            root = self.project_root
            if root is not None and not isinstance(root, (str, os.PathLike)):
                self._project = root
            else:
                key = os.path.abspath(root) if root is not None else ("default", self.path)
                found = _PROJECTS.get(key)
                if found is None:
                    found = jedi.Project(key) if root is not None else jedi.get_default_project(self.path)
                    if len(_PROJECTS) >= 64:
                        _PROJECTS.pop(next(iter(_PROJECTS)))
                    _PROJECTS[key] = found
                self._project = found
        return self._project

    def script(self, text: str):
        """A ``jedi.Script`` over ``text`` in this monitor's project."""
        import jedi

        return jedi.Script(text, path=self.path, project=self.project())

    def _names(self, trigger: Trigger) -> set[str] | None:
        import parso

        text = trigger.text
        lines = parso.split_lines(text)
        line, column = len(lines), len(lines[-1])
        script = self.script(text)
        if trigger.kind.mode == "keyword":
            return self._keywords(script.get_signatures(line, column))
        names = {c.name for c in script.complete(line, column) if c.type in NAME_TYPES}
        if not names:
            return None
        if not self.strict and trigger.kind.name == "member" and (
                "__getattr__" in names or _SELF_DOT.search(text[-64:])):
            return None
        return names

    @staticmethod
    def _keywords(signatures) -> set[str] | None:
        names: set[str] = set()
        for signature in signatures:
            for param in signature.params:
                if param.kind == inspect.Parameter.VAR_KEYWORD:
                    return None   # **kwargs: any name goes
                if param.kind in _KEYWORD_KINDS:
                    names.add(param.name)
        return names or None

    def warm(self) -> float:
        """Load jedi, its stubs and the project now (the first query of a process is the
        slow one); returns the seconds it took."""
        start = time.perf_counter()
        text = "import os\nos.path."
        self._call(lambda: self.script(text).complete(2, len("os.path.")), timeout=None)
        return time.perf_counter() - start

    def complete(self, text: str) -> list[str] | None:
        """The names jedi offers where ``text`` ends (after ``obj.`` or ``obj.pre``: those
        starting with the typed prefix; private and dunder names only when the prefix
        starts with ``_``), or None when it knows nothing: what an editor lists."""
        match = re.search(r"[^\W\d]\w*\Z|\Z", text)
        typed = match.group(0)
        cut = text[:len(text) - len(typed)]

        def run():
            import parso

            lines = parso.split_lines(cut)
            return [c for c in self.script(cut).complete(len(lines), len(lines[-1])) if c.type in NAME_TYPES]

        found = self._call(run)
        names = sorted({c.name for c in found if c.name.startswith(typed)
                        and (typed.startswith("_") or not c.name.startswith("_"))})
        return names or None
