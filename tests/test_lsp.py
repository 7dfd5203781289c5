"""``gramgen lsp`` end to end: a real LSP client (pytest-lsp, over pygls) drives the server
as a subprocess over stdio, with SmolLM2 on the CPU and the jedi monitor.

One server for the module (loading the model takes seconds); requests keep
``--max-new-tokens`` small. Its timeout is long so that answers do not depend on the
machine's speed: the time budget is tested on the engine (tests/test_lsp_engine.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROJECT = Path(__file__).parent / "fixtures" / "lsp_project"
MAIN = PROJECT / "main.py"
SERVER = [sys.executable, "-m", "gramgen.cli", "lsp", "--model", "smollm2", "--device", "cpu",
          "--max-new-tokens", "12", "--timeout", "60", "--candidates", "3"]
CAPABILITIES = types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        completion=types.CompletionClientCapabilities(),
        inline_completion=types.InlineCompletionClientCapabilities()),
)


def members(class_name: str) -> set[str]:
    """Every attribute an instance of the fixture's class has (inherited ones and dunders
    included), read by importing the fixture module."""
    spec = importlib.util.spec_from_file_location("lsp_fixture_shapes", PROJECT / "shapes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    instance = getattr(module, class_name)(1.0)
    return set(dir(instance))


async def start(client: LanguageClient) -> types.InitializeResult:
    return await client.initialize_session(types.InitializeParams(
        capabilities=CAPABILITIES, root_uri=PROJECT.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=PROJECT.as_uri(), name="lsp_project")]))


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await start(lsp_client)
    yield
    await lsp_client.shutdown_session()


def open_document(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))


def end_of(text: str) -> types.Position:
    """The position after the last character of ``text`` (UTF-16 units)."""
    lines = text.split("\n")
    return types.Position(line=len(lines) - 1, character=len(lines[-1].encode("utf-16-le")) // 2)


async def complete(client: LanguageClient, uri: str, position: types.Position) -> types.CompletionList:
    return await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=position))


async def inline(client: LanguageClient, uri: str, position: types.Position, **kw):
    return await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=position,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))


async def test_initialize_advertises_completion_and_inline_completion(client: LanguageClient):
    caps = client.init_result.capabilities
    assert caps.completion_provider is not None
    assert list(caps.completion_provider.trigger_characters) == ["."]
    assert caps.inline_completion_provider is not None
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.position_encoding in (None, types.PositionEncodingKind.Utf16)


async def test_completion_after_a_dot_names_only_real_members(client: LanguageClient):
    text = MAIN.read_text()
    open_document(client, MAIN.as_uri(), text)
    position = types.Position(line=4, character=len("size = wheel."))
    assert text.split("\n")[4] == "size = wheel."
    result = await complete(client, MAIN.as_uri(), position)
    labels = [item.label for item in result.items]
    assert labels, "no completion"
    assert len(labels) == len(set(labels))
    real = members("Circle")
    assert set(labels) <= real, f"not members of Circle: {set(labels) - real}"
    for item in result.items:   # each replaces nothing: the cursor follows the dot
        assert item.text_edit.range == types.Range(position, position)
        assert item.text_edit.new_text == item.label
    # the model was loaded with a progress notification (begin, then end)
    kinds = [[type(v).__name__ for v in values] for values in client.progress_reports.values()]
    assert ["WorkDoneProgressBegin", "WorkDoneProgressEnd"] in kinds


async def test_inline_completion_returns_text(client: LanguageClient):
    uri = (PROJECT / "inline.py").as_uri()
    text = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    "
    open_document(client, uri, text)
    result = await inline(client, uri, end_of(text))
    assert len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.strip()
    assert item.range == types.Range(end_of(text), end_of(text))


async def test_did_change_then_completion_sees_the_new_text(client: LanguageClient):
    """An incremental edit on a line with an emoji (2 UTF-16 units) before the cursor:
    the server must place the cursor by UTF-16 units, see the edited text (``Square``,
    not ``Circle``) and replace exactly the typed ``ou``."""
    uri = (PROJECT / "edited.py").as_uri()
    text = "from shapes import Circle, Square\n\nbox = Circle(3.0)\n"
    open_document(client, uri, text)
    line = 'mark = "😀"; box.ou'
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[
            types.TextDocumentContentChangePartial(   # Circle -> Square on line 2
                range=types.Range(types.Position(2, 6), types.Position(2, 12)), text="Square"),
            types.TextDocumentContentChangePartial(   # a new last line
                range=types.Range(types.Position(3, 0), types.Position(3, 0)), text=line),
        ]))
    cursor = types.Position(line=3, character=len(line) + 1)   # the emoji counts 2
    result = await complete(client, uri, cursor)
    labels = [item.label for item in result.items]
    assert labels
    assert set(labels) <= members("Square")
    assert all(label.startswith("ou") for label in labels)
    assert "outline_mm" in labels
    for item in result.items:
        assert item.text_edit.range == types.Range(types.Position(3, cursor.character - 2), cursor)


async def test_cancel_request_stops_the_generation(client: LanguageClient):
    uri = (PROJECT / "cancelled.py").as_uri()
    text = "import os\n\n\ndef walk_tree(top):\n    "
    open_document(client, uri, text)
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=end_of(text),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))
    # (pygls's send_request writes at once; pytest-lsp's send_request_async only when awaited)
    pending = client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params,
                                           msg_id="to-cancel")
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(pending)
    # the worker is free again: the next request is answered
    result = await complete(client, MAIN.as_uri(), types.Position(line=4, character=len("size = wheel.")))
    assert result.items
    # the worker reports the cancelled job once it has stopped it
    assert any(m.message.startswith("gramgen: inline:") and m.message.endswith("stopped: cancelled")
               for m in client.log_messages)


async def test_a_newer_request_supersedes_the_older_one(client: LanguageClient):
    uri = (PROJECT / "superseded.py").as_uri()
    text = "import json\n\n\ndef load_config(path):\n    "
    open_document(client, uri, text)
    older = asyncio.ensure_future(inline(client, uri, end_of(text)))
    await asyncio.sleep(0)
    newer = asyncio.ensure_future(inline(client, uri, end_of(text)))
    first, second = await older, await newer
    assert len(first.items) == 0
    assert len(second.items) == 1
    assert any("stopped: superseded" in m.message for m in client.log_messages)


async def test_request_for_a_document_never_opened_answers_empty(client: LanguageClient):
    result = await complete(client, (PROJECT / "nowhere.py").as_uri(), types.Position(0, 0))
    assert result is None
    assert any("not open" in m.message for m in client.log_messages)


# -- a server whose model cannot load: errors are logged, answers are empty, exit is clean --

BROKEN = [sys.executable, "-m", "gramgen.cli", "lsp", "--model", str(PROJECT / "no-such-model")]


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=BROKEN))
async def broken(lsp_client: LanguageClient):
    await start(lsp_client)
    yield
    if lsp_client._server.returncode is None:   # the test failed before its shutdown
        await lsp_client.shutdown_session()


async def test_a_model_that_fails_to_load_is_reported_and_exit_is_clean(broken: LanguageClient):
    open_document(broken, MAIN.as_uri(), MAIN.read_text())
    result = await complete(broken, MAIN.as_uri(), types.Position(line=4, character=13))
    assert len(result.items) == 0
    errors = [m.message for m in broken.log_messages if m.type == types.MessageType.Error]
    assert any("cannot load the model" in m for m in errors)
    assert any("completion failed" in m for m in errors)
    assert any("cannot load the model" in m.message for m in broken.messages)
    await broken.shutdown_session()   # shutdown, then exit
    assert broken._server.returncode == 0
