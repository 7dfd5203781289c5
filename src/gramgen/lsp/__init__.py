"""``gramgen lsp``: a code-completion language server over stdio (pygls).

It offers ``textDocument/completion`` (the model's completions of the identifier at the
cursor, member names checked by the jedi monitor) and ``textDocument/inlineCompletion``
(ghost text). :mod:`.text` keeps the open documents and LSP positions, :mod:`.engine`
decides what to generate and when to stop, :mod:`.server` wires them to the protocol.
"""

from .engine import Candidate, CompletionEngine, Inline, Job, Request, ServerOptions
from .server import build_server, serve

__all__ = ["Candidate", "CompletionEngine", "Inline", "Job", "Request", "ServerOptions", "build_server",
           "serve"]
