"""The protocol side of ``gramgen lsp`` (pygls): open documents, requests, progress, logs.

The event loop only reads and answers messages; loading the model and every generation
run in one worker thread (:mod:`.engine`), so a long generation never holds up a
``didChange`` or a ``$/cancelRequest``. A request's :class:`~.engine.Job` is cancelled
when the client cancels the request, when a newer request of the same kind arrives for
the same document (the older one then answers an empty result), and at ``shutdown``.
A failure (the model, jedi) is logged to the client and answered with an empty result.

pygls and lsprotocol (the ``lsp`` extra) are imported by :func:`build_server`, not with
this module, so that the ``gramgen`` command starts without them.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from .._lru import LRU
from ..errors import GramgenError
from ..monitors import JediMonitor, Trigger
from .engine import CompletionEngine, Job, Request, ServerOptions
from .text import Document

__all__ = ["CompletionService", "FileJediMonitor", "OpenDocument", "build_server", "jedi_monitors", "serve"]


@dataclass
class OpenDocument:
    """What the server keeps per open document: its text and its running jobs by kind."""

    document: Document
    jobs: dict[str, Job] = field(default_factory=dict)


class FileJediMonitor(JediMonitor):
    """A :class:`~gramgen.monitors.JediMonitor` that shows jedi the file after the cursor
    too (``after``): in an editor the file goes on past the cursor, and the methods
    defined below the one being written are members as well.

    Answers are remembered across requests (:data:`REMEMBERED` of them) by the file, the
    trigger's text and ``after``: while the user types a name after ``obj.``, each
    keystroke's request asks about the same trigger in the same text, so jedi is asked
    once. A change anywhere in the document is a new question."""

    #: the answers kept, across requests
    REMEMBERED = 32
    _answers: LRU[tuple, frozenset | None] = LRU(REMEMBERED)

    def __init__(self, after: str = "", **options):
        super().__init__(**options)
        self.after = after

    def script(self, text: str):
        return super().script(text + self.after)

    def names(self, trigger: Trigger):
        root = self.project_root if isinstance(self.project_root, (str, os.PathLike, type(None))) else id(
            self.project_root)
        key = (str(root), self.path, trigger.kind, trigger.text, self.after)
        found = self._answers.get(key)
        if found is None:
            answer = super().names(trigger)
            found = (None if answer is None else frozenset(answer),)
            self._answers.put(key, found)
        return found[0]


def jedi_monitors(request: Request, timeout: float | None = None) -> list:
    """The monitors of a request: a :class:`FileJediMonitor` on the document, with the
    workspace as jedi's project (made per request, so it sees the repository's files as
    they are; the project itself stays warm in the process)."""
    root = request.root if request.root is not None and request.root.is_dir() else None
    return [FileJediMonitor(request.text[request.offset:], project=root, path=request.path, timeout=timeout)]


def _call_soon(loop: asyncio.AbstractEventLoop | None, callback, *args) -> None:
    """Run ``callback`` on the event loop from the worker thread (not once it is closed)."""
    if loop is None:
        return
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:   # the server is exiting
        pass


class CompletionService:
    """The server's state and behaviour: the engine, the open documents, the worker
    thread; ``server`` is the pygls ``LanguageServer`` it answers through and ``types``
    lsprotocol's types (both given by :func:`build_server`)."""

    def __init__(self, options: ServerOptions, engine: CompletionEngine | None, server, types):
        self.options = options
        if engine is None:
            monitors = (lambda request: jedi_monitors(request, options.timeout)) if options.monitor else None
            engine = CompletionEngine(options, monitors=monitors)
        self.engine = engine
        self.server = server
        self.types = types
        self.documents: dict[str, OpenDocument] = {}
        #: one thread: the model runs one generation at a time
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gramgen-lsp")
        self._event_loop: asyncio.AbstractEventLoop | None = None

    # -- messages to the client -----------------------------------------------------------

    def log(self, kind, message: str) -> None:
        self.server.window_log_message(self.types.LogMessageParams(type=kind, message=f"gramgen: {message}"))

    def log_from_worker(self, kind, message: str) -> None:
        _call_soon(self._event_loop, self.log, kind, message)

    @property
    def encoding(self) -> str:
        """The position encoding agreed at ``initialize`` ("utf-16" unless the client
        offered another that pygls supports)."""
        found = self.server.workspace.position_encoding or "utf-16"
        return str(getattr(found, "value", found))

    # -- the model ------------------------------------------------------------------------

    async def load_model(self) -> None:
        """Load the model in the worker thread (first in its queue, so requests wait for
        it), with a ``$/progress`` begin and end when the client takes server-initiated
        progress."""
        t = self.types
        loop = self._event_loop = asyncio.get_running_loop()
        started = loop.time()
        loading = self.worker.submit(self._load)
        window = self.server.client_capabilities.window
        token = f"gramgen-load-{uuid.uuid4().hex[:8]}" if window and window.work_done_progress else None
        if token is not None:
            try:
                await self.server.work_done_progress.create_async(token)
            except Exception:  # noqa: BLE001 - no progress bar is no reason to stop
                token = None
        if token is not None:
            self.server.work_done_progress.begin(token, t.WorkDoneProgressBegin(
                title="gramgen", message=f"loading the model {self.options.model}", cancellable=False))
        try:
            jedi_seconds = await asyncio.wrap_future(loading)
        except Exception as exc:  # noqa: BLE001 - reported, and every request answers empty
            message = f"cannot load the model {self.options.model}: {type(exc).__name__}: {exc}"
            self.log(t.MessageType.Error, message)
            self.server.window_show_message(t.ShowMessageParams(type=t.MessageType.Error,
                                                                message=f"gramgen: {message}"))
            done = "failed"
        else:
            done = f"model loaded in {loop.time() - started:.1f} s"
            if jedi_seconds is not None:
                done += f" (jedi {jedi_seconds:.1f} s)"
            self.log(t.MessageType.Info, done)
        if token is not None:
            self.server.work_done_progress.end(token, t.WorkDoneProgressEnd(message=done))

    def _load(self) -> float | None:
        """In the worker: the model, then jedi's first query when the monitor is on (the
        seconds it took, or None). A jedi failure here is only logged: each request's
        monitor meets it again and falls back."""
        self.engine.load()
        if not self.options.monitor:
            return None
        try:
            return JediMonitor().warm()
        except Exception as exc:  # noqa: BLE001
            self.log_from_worker(self.types.MessageType.Warning,
                                 f"jedi failed to start: {type(exc).__name__}: {exc}")
            return None

    # -- documents ------------------------------------------------------------------------

    def open(self, uri: str, text: str, version: int | None) -> None:
        self.documents[uri] = OpenDocument(Document(uri, text, version, self.encoding))

    def change(self, uri: str, version: int | None, changes) -> None:
        opened = self.documents.get(uri)
        if opened is None:
            self.log(self.types.MessageType.Warning, f"didChange of a document that is not open: {uri}")
            return
        for change in changes:
            if isinstance(change, self.types.TextDocumentContentChangePartial):
                r = change.range
                opened.document.apply(change.text, ((r.start.line, r.start.character),
                                                    (r.end.line, r.end.character)))
            else:
                opened.document.apply(change.text)
        opened.document.version = version

    def close(self, uri: str) -> None:
        opened = self.documents.pop(uri, None)
        if opened is not None:
            for job in opened.jobs.values():
                job.cancel("closed")

    def cancel_all(self, reason: str) -> None:
        for opened in self.documents.values():
            for job in opened.jobs.values():
                job.cancel(reason)

    def stop(self) -> None:
        """At shutdown or exit: stop every generation, start no other."""
        self.cancel_all("shutdown")
        self.worker.shutdown(wait=False, cancel_futures=True)

    # -- requests -------------------------------------------------------------------------

    def _request(self, uri: str, position) -> tuple[OpenDocument, Document, Request] | None:
        from pygls.uris import to_fs_path

        opened = self.documents.get(uri)
        if opened is None:
            self.log(self.types.MessageType.Warning, f"request for a document that is not open: {uri}")
            return None
        doc = opened.document
        snapshot = Document(uri, doc.text, doc.version, doc.encoding)
        offset = snapshot.offset_at(position.line, position.character)
        path = to_fs_path(uri)
        workspace = self.server.workspace
        root = workspace.root_path
        if root is None and workspace.folders:
            root = to_fs_path(next(iter(workspace.folders.values())).uri)
        if root is None and path is not None:
            root = os.path.dirname(path)
        request = Request(snapshot.text, offset, Path(path) if path else None, Path(root) if root else None)
        return opened, snapshot, request

    def _work(self, compute: Callable[[Request, Job], Any], request: Request, job: Job):
        """In the worker thread: nothing for a job cancelled while it waited; the model is
        loaded before the job's clock starts."""
        if job.cancelled:
            return None
        self.engine.load()
        job.start()
        try:
            return compute(request, job)
        finally:
            job.finish()

    async def run_job(self, kind: str, uri: str, position, compute: Callable[[Request, Job], Any]):
        """(the document as the request saw it, the request, what ``compute`` returned or
        None, the job), or None when the document is not open. Supersedes the document's
        running job of ``kind``."""
        found = self._request(uri, position)
        if found is None:
            return None
        opened, snapshot, request = found
        job = Job(self.options.timeout)
        older = opened.jobs.get(kind)
        if older is not None:
            older.cancel("superseded")
        opened.jobs[kind] = job
        loop = self._event_loop = asyncio.get_running_loop()
        work = self.worker.submit(self._work, compute, request, job)
        # reported when the worker is done with it, even after the request was cancelled
        work.add_done_callback(lambda _: _call_soon(loop, self._report, kind, job))
        try:
            value = await asyncio.wrap_future(work)
        except asyncio.CancelledError:   # $/cancelRequest: stop the generation
            job.cancel("cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - a failed request answers empty, never crashes
            self.log(self.types.MessageType.Error, f"{kind} failed: {type(exc).__name__}: {exc}")
            value = None
        finally:
            if opened.jobs.get(kind) is job:
                del opened.jobs[kind]
        if job.cancelled:
            value = None   # superseded: the answer is stale
        return snapshot, request, value, job

    def _report(self, kind: str, job: Job) -> None:
        """The job's line in the client's log, and its warnings."""
        t = self.types
        for note in job.notes:
            self.log(t.MessageType.Warning, f"{kind}: {note}")
        stats = job.monitor_stats
        jedi = ""
        if stats is not None:
            jedi = f", jedi: {stats.queries} queries in {stats.query_seconds:.2f} s"
            if stats.failures:
                self.log(t.MessageType.Warning, f"{kind}: jedi failed, names not checked there: "
                                                f"{stats.last_failure}")
        how = f", stopped: {job.reason}" if job.reason else ""
        self.log(t.MessageType.Log, f"{kind}: {job.tokens} tokens in {job.generations} "
                                    f"generations, {job.seconds:.2f} s{jedi}{how}")

    def _range(self, snapshot: Document, request: Request, typed: str):
        """The range of the typed part of the identifier before the cursor."""
        t = self.types
        start = snapshot.position_at(request.offset - len(typed))
        end = snapshot.position_at(request.offset)
        return t.Range(t.Position(*start), t.Position(*end))

    async def completion(self, params):
        t = self.types
        done = await self.run_job("completion", params.text_document.uri, params.position,
                                  self.engine.complete)
        if done is None:
            return None
        snapshot, request, candidates, job = done
        incomplete = job.reason is not None   # cut short: worth asking again
        if not candidates:
            return t.CompletionList(is_incomplete=incomplete, items=[])
        edit_range = self._range(snapshot, request, candidates[0].typed)
        return t.CompletionList(is_incomplete=incomplete, items=[
            t.CompletionItem(label=c.name, detail="gramgen", sort_text=f"{i:03d}", filter_text=c.name,
                             text_edit=t.TextEdit(range=edit_range, new_text=c.name))
            for i, c in enumerate(candidates)])

    async def inline_completion(self, params):
        t = self.types
        done = await self.run_job("inline", params.text_document.uri, params.position, self.engine.inline)
        if done is None:
            return None
        snapshot, request, inline, job = done
        if inline is None:
            return t.InlineCompletionList(items=[])
        return t.InlineCompletionList(items=[t.InlineCompletionItem(
            insert_text=inline.text, range=self._range(snapshot, request, inline.typed))])


def build_server(options: ServerOptions, engine: CompletionEngine | None = None):
    """A pygls ``LanguageServer`` with the features registered; its ``service`` attribute
    is the :class:`CompletionService` behind them."""
    try:
        from lsprotocol import types as t
        from pygls.lsp.server import LanguageServer
    except ImportError as exc:
        raise GramgenError(f"gramgen lsp needs pygls and lsprotocol: pip install 'gramgen[lsp]' "
                           f"({exc})") from None

    server = LanguageServer("gramgen", __version__,
                            text_document_sync_kind=t.TextDocumentSyncKind.Incremental)
    service = server.service = CompletionService(options, engine, server, t)

    @server.feature(t.INITIALIZED)
    async def initialized(params: t.InitializedParams) -> None:
        await service.load_model()

    @server.feature(t.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: t.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        service.open(item.uri, item.text, item.version)

    @server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: t.DidChangeTextDocumentParams) -> None:
        service.change(params.text_document.uri, params.text_document.version, params.content_changes)

    @server.feature(t.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: t.DidCloseTextDocumentParams) -> None:
        service.close(params.text_document.uri)

    @server.feature(t.TEXT_DOCUMENT_COMPLETION, t.CompletionOptions(trigger_characters=["."]))
    async def completion(params: t.CompletionParams) -> t.CompletionList | None:
        return await service.completion(params)

    @server.feature(t.TEXT_DOCUMENT_INLINE_COMPLETION, t.InlineCompletionOptions())
    async def inline_completion(params: t.InlineCompletionParams) -> t.InlineCompletionList | None:
        return await service.inline_completion(params)

    @server.feature(t.SHUTDOWN)
    def shutdown(params: None) -> None:
        service.stop()

    @server.feature(t.EXIT)
    def exit_(params: None) -> None:
        service.stop()

    return server


def serve(options: ServerOptions, engine: CompletionEngine | None = None) -> None:
    """Run the server on stdin and stdout until the client's ``exit``. Anything else
    written to stdout (a library's print or progress bar) goes to stderr instead: the
    protocol stream keeps a file descriptor of its own."""
    server = build_server(options, engine)
    sys.stdout.flush()
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server.start_io(sys.stdin.buffer, protocol_out)
