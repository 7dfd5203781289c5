"""Monitor-guided decoding on code nobody here wrote: next-identifier match and
hallucinated names, SmolLM2 with and without :class:`gramgen.monitors.JediMonitor`.

    nice -n 5 python -m bench.monitors                # 300 sites (see MONITORS.md for the time)
    python -m bench.monitors --sites 10 --out /tmp/m  # a smoke run

Sources: the standard library's ``.py`` files (test folders left out) and a few pure-Python
packages installed beside gramgen (:data:`PACKAGES`). Sites are picked at random (seeded),
one per file, alternating kinds and origins:

* ``member``: an attribute read ``expr.name`` (ast ``Attribute`` in a load context, ``expr``
  not a literal such as ``"".join``); the cut is right after the ``.``; the truth is ``name``;
* ``keyword``: a keyword argument ``f(..., name=...)``; the cut is right after the ``(`` or
  ``,`` before it (SmolLM2's tokenizer attaches the space before a word to the word, so a
  prompt ending in ``, `` would be cut inside a token); the truth is ``name``.

The code before the cut is the document: ``generate(prefix=document)`` hands all of it to
the monitor (jedi sees every import), while the model reads only its last
``--prompt-tokens`` tokens (from a line start). Each site is completed greedily twice,
``chat=False``, ``max_new_tokens`` tokens: without the monitor (``constraint=
Unconstrained``, the same decoding loop with nothing refused) and with ``JediMonitor(project=
<the package's root folder>, path=<the file>)``; the model's memo is dropped before each
call, so both pay for their forward passes.

Metrics per site (:func:`score`):

* NIM (next-identifier match, as in Agrawal et al. 2023): the first identifier the model
  writes equals the truth;
* hallucinated: the name written at the cursor (a member name; for ``keyword`` sites an
  identifier followed by ``=``) is not among the names jedi gives for the document at that
  point (:func:`valid_names`: ``complete`` after ``expr.``, the keyword parameters of
  ``get_signatures`` in a call; asked once per site, after both completions, so it warms
  nothing they time). Sites where jedi gives nothing (a type it does not know, ``**kwargs``)
  are reported apart: the monitor leaves them free by design.

Writes ``bench/results/MONITORS.md`` and ``bench/results/monitors.json``.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import importlib.util
import inspect
import json
import os
import platform
import random
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

KINDS = ("member", "keyword")
ORIGINS = ("stdlib", "packages")
#: pure-Python packages of the environment whose sources are sites too
PACKAGES = ("jedi", "parso", "lark", "pygls", "jsonschema", "referencing", "click", "jinja2",
            "packaging", "pyflakes", "attr", "h11")
#: folders of test code (and what is not the library's own code) that are left out
SKIP_DIRS = frozenset({"test", "tests", "idle_test", "testing", "site-packages", "dist-packages",
                       "__pycache__", "turtledemo", "third_party"})
#: sites this close to the top of a file have too little context to say anything
MIN_LINE = 10
#: files larger than this (bytes) are left out (jedi is slow on them, and they are few)
MAX_FILE_BYTES = 200_000
IDENT = re.compile(r"(?<![\w.])[^\W\d]\w*")
_MEMBER_NAME = re.compile(r"[ \t]*([^\W\d]\w*)")
_KEYWORD_NAME = re.compile(r"\s*([^\W\d]\w*)\s*=(?!=)")

#: the paper's figures this run is compared with (Table 1 of Agrawal et al. 2023, DotPrompts,
#: CodeGen-350M-Multi, NIM score@1 without and with its monitor)
PAPER = {"model": "CodeGen-350M-Multi", "nim": 68.9, "nim_mgd": 76.2}


@dataclass(frozen=True)
class Site:
    """A place to complete: ``offset`` is the cut (characters into the file's text), the
    completion should start with the identifier ``truth``."""

    kind: str
    offset: int
    truth: str
    line: int
    #: inside an f-string's replacement field (``f"{obj.name}"``)
    in_fstring: bool = False


# -- sources and sites --------------------------------------------------------------------------

def _python_files(top: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(("config-", ".")))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".py")]
    return found


def source_files(packages=PACKAGES) -> dict[str, list[tuple[Path, Path]]]:
    """Per origin, the ``(file, project root)`` pairs: a file's root is its top-level
    package's folder (a standard-library module outside a package: the library's folder)."""
    stdlib = Path(os.path.dirname(os.__file__))
    out: dict[str, list[tuple[Path, Path]]] = {"stdlib": [], "packages": []}
    for path in _python_files(stdlib):
        rel = path.relative_to(stdlib)
        out["stdlib"].append((path, stdlib / rel.parts[0] if len(rel.parts) > 1 else stdlib))
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        top = Path(list(spec.submodule_search_locations)[0])
        out["packages"] += [(path, top) for path in _python_files(top)]
    return out


def read_source(path: Path) -> str | None:
    """The file's text (newlines as ``\\n``), or None when it is too large or not Python
    that this interpreter parses."""
    if path.stat().st_size > MAX_FILE_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            import tokenize

            encoding, _ = tokenize.detect_encoding(f.readline)
        text = path.read_text(encoding=encoding)
        ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return None
    return text


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [m.end() for m in re.finditer("\n", text)]
    return starts


def _offset(text: str, starts: list[int], lineno: int, col_bytes: int) -> int:
    """The character offset of ast's (1-based line, UTF-8 byte column)."""
    start = starts[lineno - 1]
    end = starts[lineno] if lineno < len(starts) else len(text)
    line = text[start:end].encode("utf-8")
    return start + len(line[:col_bytes].decode("utf-8"))


def _in_fstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside f-strings' replacement fields."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


def member_sites(text: str, tree: ast.AST | None = None) -> list[Site]:
    """Every attribute read ``expr.name`` with ``name`` right after the ``.`` and ``expr``
    not a literal."""
    tree = tree or ast.parse(text)
    starts = _line_starts(text)
    fstring = _in_fstrings(tree)
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        if isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            continue
        end = _offset(text, starts, node.end_lineno, node.end_col_offset)
        cut = end - len(node.attr)
        if text[cut:end] != node.attr or text[cut - 1:cut] != ".":
            continue   # `a . b`, a name spelled with a line continuation: not this kind of site
        sites.append(Site("member", cut, node.attr, node.end_lineno, id(node) in fstring))
    return sorted(sites, key=lambda s: s.offset)


def keyword_sites(text: str, tree: ast.AST | None = None) -> list[Site]:
    """Every keyword argument ``name=`` of a call whose ``(`` or ``,`` is followed only by
    whitespace up to ``name``; the cut is right after that ``(`` or ``,``."""
    tree = tree or ast.parse(text)
    starts = _line_starts(text)
    fstring = _in_fstrings(tree)
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg is None:
                continue   # **mapping
            at = _offset(text, starts, keyword.lineno, keyword.col_offset)
            if not text.startswith(keyword.arg, at):
                continue
            cut = at
            while cut > 0 and text[cut - 1] in " \t\n":
                cut -= 1
            if text[cut - 1:cut] not in ("(", ","):
                continue   # a comment or a line continuation in between
            sites.append(Site("keyword", cut, keyword.arg, keyword.lineno, id(node) in fstring))
    return sorted(sites, key=lambda s: s.offset)


def candidates(text: str, kind: str) -> list[Site]:
    """The sites of ``kind`` in ``text`` far enough from the top of the file."""
    tree = ast.parse(text)
    found = member_sites(text, tree) if kind == "member" else keyword_sites(text, tree)
    return [s for s in found if s.line > MIN_LINE]


def pick_sites(files: dict[str, list[tuple[Path, Path]]], count: int, seed: int, read=read_source):
    """``count`` sites, one per file, as ``(origin, file, root, text, site)``: site ``i`` is
    of kind ``KINDS[i % 2]`` from origin ``ORIGINS[i // 2 % 2]``, from the next file of that
    origin (in a seeded shuffle) that has one, at a seeded random place in it."""
    rng = random.Random(seed)
    queues = {}
    for origin in ORIGINS:
        shuffled = list(files.get(origin, ()))
        rng.shuffle(shuffled)
        queues[origin] = shuffled
    picked = []
    for i in range(count):
        kind, origin = KINDS[i % 2], ORIGINS[i // 2 % 2]
        queue = queues[origin]
        while queue:
            path, root = queue.pop()
            text = read(path)
            if text is None:
                continue
            found = candidates(text, kind)
            if found:
                picked.append((origin, path, root, text, rng.choice(found)))
                break
        else:
            raise ValueError(f"not enough {origin} files with {kind} sites for {count} sites")
    return picked


def prompt_start(text: str, offsets: list[tuple[int, int]], max_tokens: int) -> int:
    """Where the model's prompt starts in ``text`` (whose tokens' character spans are
    ``offsets``): at the first line start within its last ``max_tokens`` tokens (0 when it
    has no more; the last line start when not even one line fits)."""
    if len(offsets) <= max_tokens:
        return 0
    first = offsets[-max_tokens][0]
    if first > 0 and text[first - 1] == "\n":
        return first
    nl = text.find("\n", first)
    if nl == -1 or nl + 1 >= len(text):
        return text.rfind("\n", 0, len(text) - 1) + 1
    return nl + 1


def defined_after(text: str, offset: int, name: str) -> bool:
    """Whether the file defines ``name`` after the cut (``def name``, ``class name``,
    ``name =`` or ``.name =``): jedi, reading only the code before the cut, cannot know it."""
    pattern = (rf"\b(?:def|class)\s+{re.escape(name)}\b"
               rf"|(?:^[ \t]*|\.){re.escape(name)}\s*(?::[^=\n]*)?=(?!=)")
    return re.search(pattern, text[offset:], re.MULTILINE) is not None


# -- scoring -------------------------------------------------------------------------------------

def first_identifier(output: str) -> str | None:
    """The first identifier the model wrote (not a number's letters, not after a ``.``)."""
    match = IDENT.search(output)
    return match.group(0) if match else None


def written_name(kind: str, output: str) -> str | None:
    """The name the output writes at the cursor: for ``member``, the identifier that
    starts it; for ``keyword``, an identifier followed by ``=`` (a keyword argument; a
    positional argument names no parameter). None when it writes none."""
    match = (_MEMBER_NAME if kind == "member" else _KEYWORD_NAME).match(output)
    return match.group(1) if match else None


def score(kind: str, output: str, truth: str, valid: set[str] | None) -> dict:
    """NIM and hallucination of one output (``valid``: jedi's names there, None: unknown).
    A name the output ends in (``max_new_tokens`` ran out inside it) is ``unfinished``: it
    is hallucinated only if no valid name starts with it. ``spaced``: a keyword name
    written with whitespace before its ``=`` (``name = value``)."""
    name = written_name(kind, output)
    first = first_identifier(output)
    unfinished = name is not None and kind == "member" and output.rstrip() == output and output.endswith(name)
    wrong = bool(valid) and name is not None and name not in valid
    if wrong and unfinished:
        wrong = not any(v.startswith(name) for v in valid)
    spaced = kind == "keyword" and name is not None and not output.lstrip().startswith(name + "=")
    return {"first": first, "nim": first == truth, "name": name, "unfinished": unfinished,
            "spaced": spaced, "hallucinated": wrong}


def valid_names(kind: str, document: str, path: str, project) -> set[str] | None:
    """What jedi (``project``: a root folder or a ``jedi.Project``) says is valid at the end of ``document``: the completions after
    ``expr.``, or the parameters a call takes by keyword; None when it says nothing (or the
    call takes ``**kwargs``)."""
    import jedi
    import parso

    if isinstance(project, (str, os.PathLike)):
        project = jedi.Project(project)
    lines = parso.split_lines(document)
    script = jedi.Script(document, path=path, project=project)
    if kind == "member":
        return {c.name for c in script.complete(len(lines), len(lines[-1]))} or None
    names: set[str] = set()
    for signature in script.get_signatures(len(lines), len(lines[-1])):
        for param in signature.params:
            if param.kind == inspect.Parameter.VAR_KEYWORD:
                return None
            if param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
                names.add(param.name)
    return names or None


# -- aggregation and report ----------------------------------------------------------------------

def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def summarize(records: list[dict]) -> list[dict]:
    """One row per group of sites (all, per kind, per kind and whether jedi knows the
    names there, per origin): NIM and hallucinations without and with the monitor."""
    groups = {"all": records}
    for kind in KINDS:
        of_kind = [r for r in records if r["kind"] == kind]
        groups[kind] = of_kind
        groups[f"{kind}, jedi knows"] = [r for r in of_kind if r["known"]]
        groups[f"{kind}, jedi unknown"] = [r for r in of_kind if not r["known"]]
    for origin in ORIGINS:
        groups[origin] = [r for r in records if r["origin"] == origin]
    rows = []
    for group, recs in groups.items():
        n = len(recs)
        known = [r for r in recs if r["known"]]
        row = {"group": group, "sites": n, "known": len(known),
               "truth_valid": sum(r["truth_valid"] for r in known)}
        nim = {mode: sum(r[mode]["nim"] for r in recs) for mode in ("plain", "monitor")}
        for mode in ("plain", "monitor"):
            row[f"nim_{mode}"] = _pct(nim[mode], n)
            row[f"hallucinated_{mode}"] = sum(r[mode]["hallucinated"] for r in recs)
            row[f"hallucinated_{mode}_pct"] = _pct(row[f"hallucinated_{mode}"], len(known))
            row[f"no_name_{mode}"] = sum(r[mode]["name"] is None for r in recs)
        row["nim_gain"] = _pct(nim["monitor"] - nim["plain"], n)
        row["unfinished"] = sum(r[mode]["unfinished"] for r in recs for mode in ("plain", "monitor"))
        row["changed"] = sum(r["plain"]["text"] != r["monitor"]["text"] for r in recs)
        rows.append(row)
    return rows


def timing(records: list[dict]) -> dict:
    """Seconds per completion without and with the monitor (on the timed sites: both
    calls cold), monitor masks and jedi queries (on every site)."""
    queries = sum(r["monitor"]["queries"] for r in records)
    query_seconds = sum(r["monitor"]["query_seconds"] for r in records)
    timed = [r for r in records if r.get("timed", True)]
    plain = [r["plain"]["seconds"] for r in timed]
    monitored = [r["monitor"]["seconds"] for r in timed]
    return {
        "completions": len(records), "timed_sites": len(timed),
        "plain_mean": _mean(plain), "monitor_mean": _mean(monitored),
        "plain_median": _median(plain), "monitor_median": _median(monitored),
        "monitor_mask_mean": _mean(r["monitor"]["mask_seconds"] for r in records),
        "queries": queries, "queries_per_completion": queries / len(records) if records else None,
        "query_mean": query_seconds / queries if queries else None,
        "query_seconds_max": max((r["monitor"]["query_seconds"] for r in records), default=None),
        "oracle_mean": _mean(r["oracle_seconds"] for r in records),
        "failures": sum(r["monitor"]["failures"] for r in records),
        "fallbacks": sum(r["monitor"]["fallbacks"] for r in records),
        "prompt_tokens_mean": _mean(r["prompt_tokens"] for r in records),
        "timed_prompt_tokens_mean": _mean(r["prompt_tokens"] for r in timed),
    }


def _median(values) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def targets(rows: list[dict], records: list[dict] = ()) -> dict:
    """The issue's acceptance: a NIM gain with the monitor, and no hallucinated member with
    it where jedi knows the type; keyword names with the monitor where jedi knows the
    parameters are counted beside (``spaced``: of those, written ``name = value``)."""
    by = {r["group"]: r for r in rows}
    members = by["member, jedi knows"]["hallucinated_monitor"]
    keywords = [r for r in records if r["kind"] == "keyword" and r["known"] and r["monitor"]["hallucinated"]]
    return {"nim_gain": by["all"]["nim_gain"] is not None and by["all"]["nim_gain"] > 0,
            "no_hallucinated_member_where_known": members == 0,
            "hallucinated_members_with_monitor_where_known": members,
            "hallucinated_keywords_with_monitor_where_known": by["keyword, jedi knows"]["hallucinated_monitor"],
            "of_which_spaced": sum(r["monitor"]["spaced"] for r in keywords)}


def _fmt(value, digits=1, suffix="") -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def report(data: dict) -> str:
    """MONITORS.md from the JSON data."""
    meta, rows, times, goal = data["meta"], data["summary"], data["timing"], data["targets"]
    by = {r["group"]: r for r in rows}
    out = [
        "# Monitor-guided decoding: SmolLM2 with and without JediMonitor",
        "",
        "```",
        meta["command"],
        "```",
        "",
        f"{meta['date']} · {meta['machine']} · Python {meta['python']} · jedi {meta['jedi']} · "
        f"{meta['model']} (CPU, greedy, `chat=False`, `max_new_tokens={meta['max_new_tokens']}`) · "
        f"{len(data['records'])} sites, seed {meta['seed']} · prompts: the last "
        f"{meta['prompt_tokens']} tokens before the cut (mean {_fmt(times['prompt_tokens_mean'], 0)}), "
        f"the monitor reads the whole file up to the cut (`prefix=`) · run took "
        f"{_fmt(meta['wall_minutes'])} min.",
        "",
        "Sites: one per file, picked at random (seeded) from the standard library's `.py` files "
        f"(tests left out) and from {', '.join(meta['packages'])}. `member`: the cut is right after "
        "the `.` of an attribute read `expr.name`; `keyword`: right after the `(` or `,` before a "
        "keyword argument `name=` (whitespace and the name are the model's to write). NIM: the first "
        "identifier of the output is the truth. Hallucinated: the name written at the cursor "
        "(for `keyword`, an identifier followed by `=`) is not among jedi's names for the document "
        "at that point; counted on the sites where jedi knows some (its percentage is of those).",
        "",
        "## Results",
        "",
        "| sites | n | jedi knows | truth among jedi's names | NIM plain | NIM monitor | gain | "
        "hallucinated plain | hallucinated monitor | no name at cursor (plain / monitor) | output changed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {row['group']} | {row['sites']} | {row['known']} | {row['truth_valid']} / {row['known']} | "
            f"{_fmt(row['nim_plain'], suffix=' %')} | {_fmt(row['nim_monitor'], suffix=' %')} | "
            f"{_fmt(row['nim_gain'], suffix=' pt')} | "
            f"{row['hallucinated_plain']} ({_fmt(row['hallucinated_plain_pct'], suffix=' %')}) | "
            f"{row['hallucinated_monitor']} ({_fmt(row['hallucinated_monitor_pct'], suffix=' %')}) | "
            f"{row['no_name_plain']} / {row['no_name_monitor']} | {row['changed']} |")
    out += [
        "",
        "Targets (issue 22): NIM gain with the monitor: "
        f"**{'met' if goal['nim_gain'] else 'not met'}** ({_fmt(by['all']['nim_gain'], suffix=' pt')}); "
        "0 hallucinated members with the monitor where jedi knows the type: "
        f"**{'met' if goal['no_hallucinated_member_where_known'] else 'not met'}** "
        f"({goal['hallucinated_members_with_monitor_where_known']}). Keyword names not among the "
        f"parameters with the monitor where jedi knows them: {goal['hallucinated_keywords_with_monitor_where_known']}, "
        f"{goal['of_which_spaced']} of them written `name = value`. Outputs that ended inside a name "
        f"(`max_new_tokens` ran out; no match, and hallucinated only if no valid name starts so): "
        f"{by['all']['unfinished']}. \"no name at cursor\": a member site's output does not start with "
        "an identifier, a keyword site's writes no `name=` (a positional argument, a closing paren).",
        "",
        "## Names hallucinated with the monitor where jedi knows them",
        "",
        "| site | written | output with the monitor | jedi queries | why the monitor let it through |",
        "|---|---|---|---|---|",
    ]
    for r in data["records"]:
        if r["known"] and r["monitor"]["hallucinated"]:
            out.append(f"| {r['kind']} `{r['file']}:{r['line']}` | `{r['monitor']['name']}` | "
                       f"`{_cell(r['monitor']['text'])}` | {r['monitor']['queries']} | {_why(r)} |")
    missing = [r for r in data["records"] if r["kind"] == "member" and r["known"] and not r["truth_valid"]]
    below = sum(bool(r.get("defined_after")) for r in missing)
    lost = sum(r["plain"]["nim"] and not r["monitor"]["nim"] for r in missing)
    out += [
        "",
        "## Member sites where jedi's names lack the truth",
        "",
        f"{len(missing)} of {by['member, jedi knows']['sites']} member sites where jedi knows the type: the "
        f"monitor forbids the right name there. {below} of them define it below the cut (`def`, "
        "`class`, an assignment), which the monitor does not read (its document is the code before the "
        f"cursor); the plain model named it right at {lost} of them (NIM the monitor lost).",
        "",
        "| site | truth | defined below the cut | without | with |",
        "|---|---|---|---|---|",
    ]
    for r in missing:
        out.append(f"| `{r['file']}:{r['line']}` | `{r['truth']}` | {'yes' if r.get('defined_after') else 'no'} | "
                   f"`{_cell(r['plain']['text'])}` | `{_cell(r['monitor']['text'])}` |")
    out += [
        "",
        "## Time",
        "",
        "| | mean | median |",
        "|---|---|---|",
        f"| completion without the monitor | {_fmt(times['plain_mean'], 2, ' s')} | {_fmt(times['plain_median'], 2, ' s')} |",
        f"| completion with the monitor | {_fmt(times['monitor_mean'], 2, ' s')} | {_fmt(times['monitor_median'], 2, ' s')} |",
        f"| monitor masks + jedi per completion (`stats.mask_seconds`) | {_fmt(times['monitor_mask_mean'], 3, ' s')} | |",
        f"| jedi query (`monitor_query_seconds / monitor_queries`) | {_fmt(times['query_mean'], 3, ' s')} | most in one completion {_fmt(times['query_seconds_max'], 2, ' s')} |",
        f"| the bench's own jedi call per site (after the completions, warm) | {_fmt(times['oracle_mean'], 3, ' s')} | |",
        "",
        f"{times['queries']} jedi queries in {times['completions']} monitored completions "
        f"({_fmt(times['queries_per_completion'], 2)} per completion: the cut's trigger, then `(`, `,` "
        f"and `.` the model writes); {times['failures']} failed or timed out; {times['fallbacks']} "
        "fallbacks (the monitor refused every token and was set aside). Completion times are from "
        f"the {times['timed_sites']} timed sites (every {meta['timed_every']}th, mean prompt "
        f"{_fmt(times['timed_prompt_tokens_mean'], 0)} tokens), where both completions start cold (the "
        "model's memo dropped) and pay for the same prefill; on the other sites the monitored call reuses "
        "the plain call's forward passes (same outputs, less time). Monitor and jedi times are from every site.",
        "",
        "## Against the paper",
        "",
        f"Agrawal et al. 2023 (DotPrompts, Java): {PAPER['model']} NIM {PAPER['nim']} % → "
        f"{PAPER['nim_mgd']} % with its monitor (+{PAPER['nim_mgd'] - PAPER['nim']:.1f} pt). Here: "
        f"{_fmt(by['all']['nim_plain'], suffix=' %')} → {_fmt(by['all']['nim_monitor'], suffix=' %')} "
        f"on all sites, {_fmt(by['member']['nim_plain'], suffix=' %')} → "
        f"{_fmt(by['member']['nim_monitor'], suffix=' %')} on member sites, "
        f"{_fmt(by['member, jedi knows']['nim_plain'], suffix=' %')} → "
        f"{_fmt(by['member, jedi knows']['nim_monitor'], suffix=' %')} on the member sites where jedi knows "
        "the type (the paper's monitor, like ours, restricts member names; keyword sites gain nothing "
        "here: the keyword mode may only refuse a wrong `name=`, not steer toward a right one). "
        "The settings differ:",
        "",
        "- Python and jedi (dynamic typing: jedi knows the type at only some sites, and leaves the "
        "others free), not Java and Eclipse JDT (static types: the monitor almost always knows);",
        "- SmolLM2-135M-Instruct (a small general instruct model), not CodeGen-350M-Multi (a code model);",
        "- sites: attribute reads and keyword arguments cut at random in standard-library and package "
        "files, not the paper's method-completion prompts from Java repositories, each ending at a "
        "dereference (`obj.`) in a method body;",
        "- greedy, one completion, the first identifier only (the paper reports score@k over sampled "
        f"completions of whole method bodies); prompts are the last {meta['prompt_tokens']} tokens "
        "before the cut, not the paper's repository-level context;",
        "- jedi reads the file up to the cursor only (the names a class defines below the cut are "
        "unknown to it, see above), with `strict=True` (lists from objects with `__getattr__` "
        "restrict too).",
        "",
        "## Outputs the monitor changed",
        "",
        "| site | truth | without | with |",
        "|---|---|---|---|",
    ]
    changed = [r for r in data["records"] if r["plain"]["text"] != r["monitor"]["text"]]
    for r in changed[:25]:
        out.append(f"| {r['kind']} `{r['file']}:{r['line']}` | `{r['truth']}` | "
                   f"`{_cell(r['plain']['text'])}` | `{_cell(r['monitor']['text'])}` |")
    if len(changed) > 25:
        out.append(f"| … {len(changed) - 25} more in monitors.json | | | |")
    return "\n".join(out) + "\n"


def _why(record: dict) -> str:
    """Why the monitor let a name jedi does not know through, as far as the record says."""
    if record.get("in_fstring"):
        return "inside an f-string's replacement field"
    if record["monitor"]["spaced"]:
        return "`name = value` (spaces around `=`)"
    if not record["monitor"]["queries"]:
        return "no trigger fired at the cut"
    return "?"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|").replace("`", "'")


# -- the run -------------------------------------------------------------------------------------

def _complete(model, prompt: str, document: str, max_new_tokens: int, monitor, cold: bool) -> dict:
    import gramgen
    from gramgen.monitors import Unconstrained

    if cold:
        model.forget()
    kwargs = (dict(monitors=[monitor], prefix=document) if monitor is not None
              else dict(constraint=Unconstrained(model.vocab)))
    start = time.perf_counter()
    result = gramgen.generate(model, prompt, chat=False, max_new_tokens=max_new_tokens, **kwargs)
    seconds = time.perf_counter() - start
    stats = result.stats
    return {"text": result.text, "seconds": seconds, "mask_seconds": stats.mask_seconds,
            "tokens": stats.new_tokens, "queries": stats.monitor_queries,
            "query_seconds": stats.monitor_query_seconds,
            "triggers": stats.monitor_triggers, "failures": stats.monitor_failures,
            "fallbacks": stats.monitor_fallbacks}


def run_site(model, origin: str, path: Path, root: Path, text: str, site: Site, prompt_tokens: int,
             max_new_tokens: int, timed: bool = True) -> dict:
    """Both completions of one site and their scores. ``timed``: both calls start cold;
    otherwise the monitored one reuses the forward passes the plain one made (the same
    prompt: its prefill, and its steps until the outputs part), which changes no output."""
    from gramgen.monitors import JediMonitor

    document = text[:site.offset]
    offsets = model.tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    start = prompt_start(document, offsets, prompt_tokens)
    prompt = document[start:]
    monitor = JediMonitor(project=str(root), path=str(path))
    record = {"origin": origin, "file": _short(path), "path": str(path), "root": str(root), "kind": site.kind,
              "line": site.line, "offset": site.offset, "truth": site.truth, "in_fstring": site.in_fstring,
              "defined_after": defined_after(text, site.offset, site.truth),
              "prompt_tokens": len(model.tokenizer(prompt, add_special_tokens=False)["input_ids"])}
    record["timed"] = timed
    record["plain"] = _complete(model, prompt, document, max_new_tokens, None, cold=True)
    record["monitor"] = _complete(model, prompt, document, max_new_tokens, monitor, cold=timed)
    begin = time.perf_counter()
    valid = valid_names(site.kind, document, str(path), monitor.project())
    record["oracle_seconds"] = time.perf_counter() - begin
    record["known"] = valid is not None
    record["valid_count"] = len(valid) if valid else 0
    record["truth_valid"] = bool(valid) and site.truth in valid
    for mode in ("plain", "monitor"):
        record[mode].update(score(site.kind, record[mode]["text"], site.truth, valid))
        if record[mode]["hallucinated"]:
            record[mode]["valid_sample"] = sorted(valid)[:40]
    return record


def _short(path: Path) -> str:
    parts = path.parts
    for anchor in ("site-packages", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor):])
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sites", type=int, default=300, help="sites to complete (half member, half keyword)")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--prompt-tokens", type=int, default=512,
                        help="the model reads at most this many tokens before the cut")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: a second thread spinning on a busy 2-core machine costs more than it gives)")
    parser.add_argument("--timed-every", type=int, default=5,
                        help="every N-th site runs both completions cold and times them; the others let the "
                             "monitored call reuse the plain call's forward passes (1: time every site)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="start no new site after this many minutes (the report says how many ran)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild MONITORS.md (and the aggregates) from monitors.json, no model")
    args = parser.parse_args(argv)
    if args.report_only:
        return rewrite_report(args.out)

    import jedi
    import torch

    import gramgen
    from gramgen.monitors import JediMonitor

    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    files = source_files()
    print(f"sources: {len(files['stdlib'])} standard-library files, {len(files['packages'])} package files",
          flush=True)
    sites = pick_sites(files, args.sites, args.seed)
    print(f"picked {len(sites)} sites in {time.perf_counter() - began:.1f} s", flush=True)
    model = gramgen.load_model("smollm2")
    warm = JediMonitor().warm()
    print(f"jedi warmed in {warm:.1f} s", flush=True)
    records = []
    for i, (origin, path, root, text, site) in enumerate(sites, 1):
        if args.budget_minutes and time.perf_counter() - began > 60 * args.budget_minutes:
            print(f"stopping after {len(records)} sites: the {args.budget_minutes} min budget is spent", flush=True)
            break
        record = run_site(model, origin, path, root, text, site, args.prompt_tokens, args.max_new_tokens,
                          timed=(i - 1) % args.timed_every == 0)
        records.append(record)
        p, m = record["plain"], record["monitor"]
        print(f"[{i}/{len(sites)}] {site.kind:7} {record['file']}:{site.line} truth={site.truth!r} "
              f"jedi={'knows' if record['known'] else 'unknown'} plain={p['first']!r}{'+' if p['nim'] else ''}"
              f"{'!' if p['hallucinated'] else ''} monitor={m['first']!r}{'+' if m['nim'] else ''}"
              f"{'!' if m['hallucinated'] else ''} {p['seconds']:.1f}s/{m['seconds']:.1f}s "
              f"jedi {m['query_seconds']:.2f}s/{m['queries']}q", flush=True)
    rows = summarize(records)
    command = "nice -n 5 python -m bench.monitors" + (" " + shlex.join(argv if argv is not None else sys.argv[1:])
                                                      if (argv if argv is not None else sys.argv[1:]) else "")
    data = {
        "meta": {"command": command.strip(), "date": _dt.date.today().isoformat(),
                 "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {args.threads} torch threads",
                 "python": platform.python_version(), "jedi": jedi.__version__, "torch": torch.__version__,
                 "model": "SmolLM2-135M-Instruct", "seed": args.seed, "prompt_tokens": args.prompt_tokens,
                 "max_new_tokens": args.max_new_tokens, "sites_asked": args.sites, "timed_every": args.timed_every, "packages": list(PACKAGES),
                 "jedi_warm_seconds": warm, "wall_minutes": (time.perf_counter() - began) / 60},
        "summary": rows, "timing": timing(records), "targets": targets(rows, records), "records": records,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "monitors.json").write_text(json.dumps(data, indent=1, default=_json_default) + "\n")
    (args.out / "MONITORS.md").write_text(report(data))
    print(report(data).split("## Time")[0], flush=True)
    print(f"wrote {args.out / 'MONITORS.md'} and monitors.json in {data['meta']['wall_minutes']:.1f} min")
    return 0


def _complete_record(record: dict) -> None:
    """Add what records of an older run lack (``path``, ``in_fstring``, ``defined_after``)
    from the source file, finding the site again by its offset."""
    if "path" not in record:
        root = Path(record["root"])
        record["path"] = str(next((c for c in (root / record["file"], root.parent / record["file"]) if c.is_file()),
                                  root / record["file"]))
    if "in_fstring" in record and "defined_after" in record:
        return
    text = read_source(Path(record["path"]))
    if text is None:
        return
    found = [s for s in (member_sites(text) if record["kind"] == "member" else keyword_sites(text))
             if s.offset == record["offset"] and s.truth == record["truth"]]
    record.setdefault("in_fstring", bool(found) and found[0].in_fstring)
    record.setdefault("defined_after", defined_after(text, record["offset"], record["truth"]))


def rewrite_report(out: Path) -> int:
    """``--report-only``: the aggregates and MONITORS.md again from monitors.json."""
    data = json.loads((out / "monitors.json").read_text())
    records = data["records"]
    for record in records:
        _complete_record(record)
    data["summary"] = summarize(records)
    data["timing"] = timing(records)
    data["targets"] = targets(data["summary"], records)
    (out / "monitors.json").write_text(json.dumps(data, indent=1, default=_json_default) + "\n")
    (out / "MONITORS.md").write_text(report(data))
    print(f"rewrote {out / 'MONITORS.md'} from monitors.json")
    return 0


def _json_default(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Site):
        return asdict(value)
    raise TypeError(type(value).__name__)


if __name__ == "__main__":
    raise SystemExit(main())
