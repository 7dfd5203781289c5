"""The ``gramgen`` command: ``extract`` (documents -> JSON), ``check`` (records vs a schema),
``lsp`` (a code-completion language server on stdio), ``bench`` (the benchmark of a
repository checkout). Also ``python -m gramgen``."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from .automata.vocabulary import Vocabulary
from .errors import GramgenError, TokenRejected
from .extraction import (Document, RecordWriter, extract_options, load_schema, prompt_template, run_batch,
                         schema_validator)
from .generation import Speculation, generate
from .generation.speculation import DRAFTERS
from .grammar import Grammar
from .hf import load_model
from .lsp import ServerOptions, serve as serve_lsp
from .ray.extract import extract_with_ray
from .runtime import compile as compile_grammar

WHITESPACE_CHOICES = ["compact", "standard", "flexible"]
_GLOB_CHARS = set("*?[")


# -- documents -----------------------------------------------------------------------------

def _read_text_file(path: Path, doc_id: str) -> Document:
    try:
        return Document(doc_id, path.read_text(encoding="utf-8"), where=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        return Document(doc_id, None, f"cannot read {path}: {exc}", where=str(path))


def _lines(path: Path) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text, None) for each line of a UTF-8 file, or (number, None, why)
    for a line that is not UTF-8: read as bytes, so one bad line costs only itself. A
    byte-order mark at the start is dropped. OSError when the file cannot be read."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8"), None
            except UnicodeDecodeError as exc:
                yield n, None, (f"line {n} is not UTF-8 (byte {exc.start + 1} of the line is "
                                f"{raw[exc.start:exc.start + 1]!r})")


def _read_jsonl(path: Path, field: str, id_field: str) -> Iterator[Document]:
    try:
        for n, line, undecodable in _lines(path):
            fallback = f"{path}:{n}"
            if undecodable:
                yield Document(fallback, None, undecodable, where=fallback)
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Document(fallback, None, f"line {n} is not JSON: {exc}", where=fallback)
                continue
            if not isinstance(record, dict):
                yield Document(fallback, None, f"line {n} is not a JSON object", where=fallback)
                continue
            doc_id = str(record[id_field]) if record.get(id_field) is not None else fallback
            text = record.get(field)
            if not isinstance(text, str):
                yield Document(doc_id, None, f"line {n} has no string field {field!r}", where=fallback)
                continue
            yield Document(doc_id, text, where=fallback)
    except OSError as exc:
        yield Document(str(path), None, f"cannot read {path}: {exc.strerror or exc}", where=str(path))


def _document_files(spec: str) -> list[Path]:
    path = Path(spec)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if path.exists():
        return [path]
    if _GLOB_CHARS & set(spec):
        return [Path(p) for p in sorted(glob.glob(spec, recursive=True)) if Path(p).is_file()]
    return []


def collect_documents(inputs: list[str], field: str, id_field: str) -> list[Document]:
    """Every document named by ``inputs`` (files, folders, globs; ``.jsonl`` files give one
    document per line, its ``field`` column), in a stable order. A file named twice (a
    folder and a glob in it) is read once; two documents with the same id (compared as
    text: ``1`` and ``"1"`` are one id) are a GramgenError naming both, since the output
    and a resumed run know documents by id only."""
    files: dict[Path, Path] = {}
    for spec in inputs:
        found = _document_files(spec)
        if not found:
            raise GramgenError(f"input {spec!r} matches no file")
        for path in found:
            files.setdefault(path.resolve(), path)
    docs: dict[str, Document] = {}
    for path in files.values():
        found = (_read_jsonl(path, field, id_field) if path.suffix.lower() == ".jsonl"
                 else [_read_text_file(path, str(path))])
        for doc in found:
            first = docs.setdefault(doc.id, doc)
            if first is not doc:
                raise GramgenError(f"duplicate document id {doc.id!r} at {first.where} and {doc.where} "
                                   "(ids are compared as text, so 1 and \"1\" are the same id): give each "
                                   "document its own id")
    return list(docs.values())


# -- the output file -----------------------------------------------------------------------

def check_output(path: Path) -> None:
    """GramgenError when ``path`` cannot be the output file: a folder, a path under a file,
    a file or folder this user may not write. A device or pipe (``/dev/null``) is fine:
    written, never read to resume. Nothing is created here."""
    try:
        if path.is_dir():
            raise GramgenError(f"-o {path} is a folder: give the path of a .jsonl file")
        if path.exists():
            if not os.access(path, os.W_OK):
                raise GramgenError(f"-o {path}: the file is not writable")
            return
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise GramgenError(f"-o {path}: {parent} is a file, not a folder")
                if not os.access(parent, os.W_OK | os.X_OK):
                    raise GramgenError(f"-o {path}: the folder {parent} is not writable")
                return
    except OSError as exc:
        raise GramgenError(f"-o {path}: {exc.strerror or exc}") from None


def done_ids(path: Path) -> set[str]:
    """Ids already in the output, a regular file (anything else, such as a device, is not
    read). A last line cut short by a killed run is removed."""
    if not path.is_file():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)
        data = data[:cut]
    ids = set()
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "id" in record:
            ids.add(str(record["id"]))
    return ids


# -- extract -------------------------------------------------------------------------------

def cmd_extract(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    out = Path(args.output)
    check_output(out)
    schema = load_schema(args.schema)
    validator = schema_validator(schema, args.schema)
    template = prompt_template(args.prompt_template, schema)
    docs = collect_documents(args.inputs, args.field, args.id_field)
    already = done_ids(out)
    todo = [d for d in docs if d.id not in already]
    print(f"gramgen extract: {len(docs)} documents, {len(docs) - len(todo)} already in {out}",
          file=sys.stderr)
    if not todo:
        return 0
    if args.ray is not None:
        return extract_with_ray(args, todo=todo, out=out, schema=schema, template=template,
                                options=_extract_options_of(args, schema))
    model = load_model(args.model, device=args.device)
    options = _extract_options_of(args, schema)
    generate(model, [], **options)  # compile (or fail) once, before the first document

    writer = RecordWriter(out)
    ok = failed = 0
    bar = tqdm(total=len(todo), unit="doc", file=sys.stderr, dynamic_ncols=True)
    try:
        for start in range(0, len(todo), args.batch_size):
            batch = todo[start:start + args.batch_size]
            records = {d.id: {"id": d.id, "error": d.error} for d in batch if d.error}
            readable = [d for d in batch if not d.error]
            for doc, record in run_batch(model, readable, template, validator, options, generate):
                records[doc.id] = record
            for doc in batch:
                record = records[doc.id]
                writer.write(record)
                ok, failed = ok + ("error" not in record), failed + ("error" in record)
                bar.update(1)
            bar.set_postfix(ok=ok, errors=failed)
    finally:
        bar.close()
        writer.close()
    print(f"gramgen extract: {ok} extracted, {failed} error records, written to {out}",
          file=sys.stderr)
    return 0 if failed == 0 else 1


def _extract_options_of(args: argparse.Namespace, schema: Any) -> dict[str, Any]:
    return extract_options(
        schema, grammar=Grammar.from_file(args.grammar) if args.grammar else None,
        lenient_formats=args.lenient_formats, strict=not args.no_strict, whitespace=args.whitespace,
        max_new_tokens=args.max_new_tokens, chat=not args.no_chat,
        speculative=(Speculation(tuple(args.speculative), num_draft_tokens=args.draft_tokens)
                     if args.speculative else None))


# -- check ---------------------------------------------------------------------------------

def _byte_vocabulary():
    """256 one-byte tokens and an EOS: lets a matcher check any text without a tokenizer."""
    return Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256], kind="bytes")


def grammar_verdict(compiled, text: str) -> str | None:
    """None when the grammar accepts ``text``, else why not."""
    matcher = compiled.matcher()
    data = text.encode("utf-8")
    for i, b in enumerate(data):
        try:
            matcher.advance(b)
        except TokenRejected:
            return f"rejected at byte {i}: {data[max(0, i - 20):i]!r} then {data[i:i + 10]!r}"
    return None if matcher.is_accepting() else "incomplete (the text stops too early)"


#: how ``check`` writes a record for the grammar of each ``--whitespace`` (json.dumps'
#: separators; flexible whitespace accepts the compact text)
_CHECK_SEPARATORS = {"compact": (",", ":"), "standard": (", ", ": "), "flexible": (",", ":")}


def _data_lines(path: str) -> Iterator[tuple[int, str | None, str | None]]:
    try:
        yield from _lines(Path(path))
    except OSError as exc:
        raise GramgenError(f"cannot read {path}: {exc.strerror or exc}") from None


def cmd_check(args: argparse.Namespace) -> int:
    schema = load_schema(args.schema) if args.schema else None
    validator = schema_validator(schema, args.schema) if schema is not None else None
    if args.grammar:
        grammar = Grammar.from_file(args.grammar)
    else:
        grammar = Grammar.from_json_schema(schema, whitespace=args.whitespace, lenient_formats=args.lenient_formats)
    compiled = compile_grammar(grammar, _byte_vocabulary())
    separators = _CHECK_SEPARATORS[args.whitespace]
    total = both = grammar_ok = schema_ok = 0
    for path in args.data:
        for n, line, undecodable in _data_lines(path):
            name = f"{path}:{n}"
            if undecodable:
                total += 1
                print(f"{name}\t{undecodable}")
                continue
            if not line.strip():
                continue
            total += 1
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                print(f"{name}\tnot JSON: {exc}")
                continue
            instance = record
            if args.field is not None:
                if not isinstance(record, dict) or args.field not in record:
                    print(f"{name}\tno field {args.field!r}")
                    continue
                instance = record[args.field]
            if isinstance(instance, str) and args.grammar and schema is None:
                text = instance   # a text record checked against a text grammar
            else:
                text = json.dumps(instance, ensure_ascii=False, separators=separators)
            g_error = grammar_verdict(compiled, text)
            s_error = None
            if validator is not None:
                first = next(iter(validator.iter_errors(instance)), None)
                s_error = None if first is None else first.message
            grammar_ok += g_error is None
            schema_ok += validator is not None and s_error is None
            fine = g_error is None and s_error is None
            both += fine
            if fine and args.quiet:
                continue
            verdict = "grammar: accept" if g_error is None else f"grammar: REJECT ({g_error})"
            if validator is not None:
                verdict += ("\tjsonschema: valid" if s_error is None
                            else f"\tjsonschema: INVALID ({s_error[:200]})")
            print(f"{name}\t{verdict}")
    summary = f"{total} records: grammar accepts {grammar_ok}"
    if validator is not None:
        summary += f", jsonschema accepts {schema_ok}"
    print(summary, file=sys.stderr)
    return 0 if both == total else 1


# -- bench ---------------------------------------------------------------------------------

def _repository_root() -> Path | None:
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / "bench" / "__main__.py").is_file() and (folder / "pyproject.toml").is_file():
            return folder
    return None


def cmd_bench(bench_args: list[str]) -> int:
    root = _repository_root()
    if root is None:
        raise GramgenError("gramgen bench runs the benchmark of a gramgen repository checkout: "
                           "run it inside one (bench/ was not found above the current folder)")
    return subprocess.call([sys.executable, "-m", "bench", *bench_args], cwd=root)


# -- lsp -----------------------------------------------------------------------------------

def cmd_lsp(args: argparse.Namespace) -> int:
    serve_lsp(ServerOptions(model=args.model, grammar=args.grammar, max_new_tokens=args.max_new_tokens,
                        timeout=args.timeout, monitor=not args.no_monitor, candidates=args.candidates,
                        context_chars=args.context_chars, inline_lines=args.inline_lines,
                        device=args.device, threads=args.threads))
    return 0


# -- entry point ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gramgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("extract", help="extract one JSON value per document, constrained by a schema")
    ex.add_argument("inputs", nargs="+", help="files, folders, globs or .jsonl files")
    ex.add_argument("--schema", required=True, help="JSON Schema file (constrains and validates)")
    ex.add_argument("--grammar", help="constrain with this .lark/.gbnf file instead of the schema "
                                      "(outputs are still validated by --schema)")
    ex.add_argument("--model", default="smollm2", help="'smollm2' or a Hugging Face model folder")
    ex.add_argument("-o", "--output", required=True, help="JSONL output, appended (resumable)")
    ex.add_argument("--prompt-template", help="text or file with {document} and optionally "
                                              "{keys} (the schema's top-level keys); default: a short "
                                              "extraction instruction naming the keys")
    ex.add_argument("--batch-size", type=int, default=1)
    ex.add_argument("--max-new-tokens", type=int, default=512)
    ex.add_argument("--field", default="text", help="the text column of .jsonl inputs")
    ex.add_argument("--id-field", default="id", help="the id column of .jsonl inputs")
    ex.add_argument("--whitespace", choices=WHITESPACE_CHOICES,
                    help="the JSON layout generated: compact {\"a\":1}, standard {\"a\": 1} (json.dumps), "
                         "flexible (any JSON whitespace). Default: that of gramgen.generate()")
    ex.add_argument("--no-strict", action="store_true",
                    help="let the model add object keys the schema does not declare unless it forbids "
                         "them (default: strict, no undeclared keys unless the schema allows them "
                         "explicitly with additionalProperties / unevaluatedProperties)")
    ex.add_argument("--lenient-formats", action="store_true",
                    help="take unknown `format` values (int32, ...) as annotations instead of an error")
    ex.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    ex.add_argument("--speculative", type=_drafters, metavar="DRAFTERS",
                    help="speculative decoding with these drafters, comma-separated, run in "
                         "order: forced, prompt_lookup (the same outputs, fewer forward passes)")
    ex.add_argument("--draft-tokens", type=int, default=5,
                    help="the most tokens drafted per step with --speculative (default 5)")
    ex.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
    ex.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                    help="extract on Ray Data with a pool of workers, one model each (needs "
                         "pip install gramgen[ray]): alone, on a new local Ray instance; with an "
                         "address (auto, HOST:PORT, ray://HOST:PORT), on that cluster")
    ex.add_argument("--workers", type=int,
                    help="with --ray: the number of workers, each with its own model "
                         "(default: one per CPU of the Ray cluster)")
    ex.add_argument("--ray-cpus", type=int, metavar="N",
                    help="with --ray and no address: the CPUs the local Ray instance offers "
                         "(default: all of this machine's)")
    ex.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                    help="with --ray: what the workers generate with; vllm: Ray Data LLM's vLLM "
                         "engines (vLLM and ray[data] installed), constrained by gramgen's logits "
                         "processor, --model a Hugging Face id or folder (default: transformers)")
    ex.add_argument("--engine-kwargs", type=_json_object, metavar="JSON",
                    help="with --engine vllm: vLLM's engine arguments as a JSON object, e.g. "
                         "'{\"dtype\": \"float32\", \"max_model_len\": 2048}'")
    ex.set_defaults(run=cmd_extract)

    ck = sub.add_parser("check", help="which records of JSONL files a schema (or grammar) accepts")
    ck.add_argument("data", nargs="+", help=".jsonl files, one record per line")
    ck.add_argument("--schema", help="JSON Schema file")
    ck.add_argument("--grammar", help="check with this .lark/.gbnf file instead of the schema's grammar")
    ck.add_argument("--field", help="check this field of each record instead of the record")
    ck.add_argument("--whitespace", choices=WHITESPACE_CHOICES, default="compact",
                    help="the layout of the grammar; records are written that way before the check")
    ck.add_argument("--lenient-formats", action="store_true",
                    help="take unknown `format` values (int32, ...) as annotations instead of an error")
    ck.add_argument("-q", "--quiet", action="store_true", help="print only the records that fail")
    ck.set_defaults(run=cmd_check)

    lsp = sub.add_parser("lsp", help="a code-completion language server on stdin/stdout (completion "
                                      "and inline completion from a model, member names checked by jedi)")
    lsp.add_argument("--model", default="smollm2", help="'smollm2' or a Hugging Face model folder")
    lsp.add_argument("--grammar", choices=["python", "none"], default="none",
                     help="python: every completion is a valid continuation of the document "
                          "(default: none)")
    lsp.add_argument("--max-new-tokens", type=int, default=32,
                     help="the most tokens one generation takes (default 32)")
    lsp.add_argument("--timeout", type=float, default=2.0,
                     help="seconds of generation per request; then it answers what it has (default 2)")
    lsp.add_argument("--no-monitor", action="store_true",
                     help="do not check member names with jedi")
    lsp.add_argument("--candidates", type=int, default=3, help="completion items per request (default 3)")
    lsp.add_argument("--context-chars", type=int, default=4000,
                     help="the most characters before the cursor the model sees (default 4000)")
    lsp.add_argument("--inline-lines", type=int, default=3,
                     help="the most lines of ghost text at the start of a line (default 3)")
    lsp.add_argument("--device", help="e.g. cpu, cuda (default: cuda when available)")
    lsp.add_argument("--threads", type=int,
                     help="CPU threads for the model (default: half the cores)")
    lsp.set_defaults(run=cmd_lsp)

    # listed for --help; main() forwards everything after "bench" untouched
    sub.add_parser("bench", help="run `python -m bench ARGS...` of this repository checkout",
                   add_help=False)
    return parser


#: what ``--ray ADDRESS`` takes: local, auto, HOST:PORT, or a URL such as ray://HOST:PORT
_RAY_ADDRESS = re.compile(r"local|auto|[A-Za-z][A-Za-z0-9+.-]*://\S+|[^\s/:]+:[0-9]+|\[[0-9A-Fa-f:.]+\]:[0-9]+")


def _bare_ray_option(argv: list[str]) -> list[str]:
    """``--ray`` followed by a word that is no Ray address (``--ray docs/``) takes no value:
    the word is an input, as it reads."""
    return ["--ray=local" if arg == "--ray" and i + 1 < len(argv) and not argv[i + 1].startswith("-")
            and not _RAY_ADDRESS.fullmatch(argv[i + 1]) else arg for i, arg in enumerate(argv)]


def _check_ray_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--ray``'s address must look like one (``--ray docs/`` took the inputs' folder for
    the address); ``--workers`` and ``--ray-cpus`` go with ``--ray`` and are positive."""
    if args.ray is not None and not _RAY_ADDRESS.fullmatch(args.ray):
        parser.error(f"--ray={args.ray}: not a Ray address (local, auto, HOST:PORT, ray://HOST:PORT)")
    for name in ("workers", "ray_cpus"):
        value = getattr(args, name)
        option = "--" + name.replace("_", "-")
        if value is not None and args.ray is None:
            parser.error(f"{option} goes with --ray")
        if value is not None and value < 1:
            parser.error(f"{option} must be at least 1")
    if args.ray_cpus is not None and args.ray != "local":
        parser.error("--ray-cpus sizes the local Ray instance that --ray without an address starts")
    if args.engine != "transformers" and args.ray is None:
        parser.error(f"--engine {args.engine} goes with --ray")
    if args.engine_kwargs is not None and args.engine != "vllm":
        parser.error("--engine-kwargs goes with --engine vllm")
    if args.engine == "vllm":
        refused = [option for option, given in (
            ("--grammar", args.grammar is not None), ("--lenient-formats", args.lenient_formats),
            ("--speculative", args.speculative is not None), ("--no-strict", args.no_strict),
            ("--device", args.device is not None)) if given]
        if refused:
            parser.error(f"--engine vllm does not take {', '.join(refused)}: vLLM is constrained by "
                         "the schema (strict, with --whitespace) through gramgen's logits processor; "
                         "vLLM's own settings go in --engine-kwargs")


def _json_object(text: str) -> dict:
    """``--engine-kwargs``'s value: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: give a JSON object")
    return value


def _drafters(text: str) -> list[str]:
    """``--speculative``'s value: drafter names, comma-separated, each known and once."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in DRAFTERS]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give drafters from {', '.join(DRAFTERS)}, comma-separated, each once")
    return names


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return _reporting(lambda: cmd_bench(argv[1:]))
    parser = build_parser()
    if argv[:1] == ["extract"]:
        argv = _bare_ray_option(argv)
    args = parser.parse_args(argv)
    if args.command == "extract" and args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.command == "extract" and args.draft_tokens < 1:
        parser.error("--draft-tokens must be at least 1")
    if args.command == "extract":
        _check_ray_options(parser, args)
    if args.command == "check" and not (args.schema or args.grammar):
        parser.error("check needs --schema or --grammar")
    return _reporting(lambda: args.run(args))


def _reporting(run) -> int:
    """``run()``'s exit code; a gramgen error (a bad option, schema, grammar, model or
    device) or an OSError (a file that cannot be read or written) is printed as one line
    ``gramgen: error: ...`` and exits 2, without a traceback."""
    try:
        return run()
    except (GramgenError, OSError) as exc:
        message = " ".join(str(exc).split()) if isinstance(exc, OSError) else str(exc)
        print(f"gramgen: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
