"""Workloads: a grammar file plus the texts walked through it.

json    grammars/json.lark (gramgen) + the `valid` instances of JSONSchemaBench's dev split
        (../shared/data/jsonschemabench/<category>/dev.jsonl), a seeded sample spread over
        the categories, top-level object/array only, serialized with plain `json.dumps`
        (default separators ", " / ": ", ensure_ascii=True).
python  grammars/python.lark + tests/data/python/*.py (a seeded sample in --quick).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@dataclass
class Text:
    id: str
    text: str


@dataclass
class Workload:
    name: str
    grammar_path: str  # relative to the repo root where possible
    grammar_text: str
    start: str
    texts: list[Text]
    source: str  # where the texts came from
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "grammar_path": self.grammar_path,
            "start": self.start,
            "source": self.source,
            "n_texts": len(self.texts),
            "notes": self.notes,
            "texts": [{"id": t.id, "chars": len(t.text)} for t in self.texts],
        }


@dataclass
class Sizes:
    json_n: int
    json_max_chars: int
    python_n: int
    python_max_chars: int


QUICK = Sizes(json_n=24, json_max_chars=1500, python_n=3, python_max_chars=2500)
FULL = Sizes(json_n=200, json_max_chars=20000, python_n=10_000, python_max_chars=10**9)


def _rel(p: Path) -> str:
    p = p.resolve()
    for base, prefix in ((REPO, ""), (REPO.parent, "../")):
        try:
            return prefix + str(p.relative_to(base))
        except ValueError:
            pass
    return str(p)


def _start_rule(grammar_text: str, fallback: str) -> str:
    """`start` if the grammar defines it, else `fallback` (e.g. file_input)."""
    if re.search(r"^[?!]?start\b[^:\n]*:", grammar_text, re.M):
        return "start"
    return fallback


def _read_grammar(path: Path) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"grammar file {path} does not exist (yet?)")
    return path.read_text(encoding="utf-8")


def load_json(grammar: Path, n: int, max_chars: int, seed: int) -> Workload:
    root = SHARED / "data" / "jsonschemabench"
    rng = random.Random(seed)
    per_cat: list[list[Text]] = []
    for f in sorted(root.glob("*/dev.jsonl")):
        pool = []
        for line in f.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            rec = json.loads(line)
            for i, t in enumerate(rec.get("tests") or []):
                if not t.get("valid") or not isinstance(t.get("data"), (dict, list)):
                    continue
                s = json.dumps(t["data"])
                if len(s) <= max_chars:
                    pool.append(Text(f"{rec['id']}#{i}", s))
        rng.shuffle(pool)
        if pool:
            per_cat.append(pool)
    # Round-robin over the categories so every category is represented.
    texts: list[Text] = []
    while len(texts) < n and any(per_cat):
        for pool in per_cat:
            if pool and len(texts) < n:
                texts.append(pool.pop())
    text = _read_grammar(grammar) if grammar.is_file() else ""
    notes = [
        "valid instances with a top-level object or array; "
        f"json.dumps default separators; at most {max_chars} chars; seed {seed}"
    ]
    if not text:
        notes.append(f"{_rel(grammar)} missing: only libraries with a builtin JSON grammar run")
    return Workload(
        "json",
        _rel(grammar),
        text,
        _start_rule(text, "start"),
        texts,
        _rel(root) + "/*/dev.jsonl",
        notes,
    )


def load_python(grammar: Path, texts_dir: Path, n: int, max_chars: int, seed: int) -> Workload:
    text = _read_grammar(grammar)
    files = sorted(p for p in texts_dir.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.py files in {texts_dir} (yet?)")
    pool = [Text(p.name, p.read_text(encoding="utf-8")) for p in files]
    pool = [t for t in pool if len(t.text) <= max_chars] or pool[:1]
    if len(pool) > n:
        pool = sorted(random.Random(seed).sample(pool, n), key=lambda t: t.id)
    return Workload(
        "python",
        _rel(grammar),
        text,
        _start_rule(text, "file_input"),
        pool,
        _rel(texts_dir) + "/*.py",
        [f"{len(pool)} of {len(files)} files (at most {max_chars} chars); seed {seed}"],
    )


def load(name: str, args, sizes: Sizes) -> Workload:
    if name == "json":
        return load_json(Path(args.json_grammar), sizes.json_n, sizes.json_max_chars, args.seed)
    if name == "python":
        return load_python(
            Path(args.python_grammar),
            Path(args.python_texts),
            sizes.python_n,
            sizes.python_max_chars,
            args.seed,
        )
    raise SystemExit(f"unknown workload {name!r}; known: json, python")


# --------------------------------------------------------------------------------------
# Lark templates -> flat Lark, for peers whose Lark frontend lacks templates
# --------------------------------------------------------------------------------------
def _escape_regex(rx: str) -> str:
    """Regex text for Lark's /.../ syntax: escape unescaped `/` and control characters."""
    out, esc = [], False
    for ch in rx:
        if ch == "/" and not esc:
            out.append("\\/")
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
        esc = ch == "\\" and not esc
    return "".join(out)


def flatten_lark(text: str, start: str = "start") -> str:
    """Expand a Lark grammar with lark itself (templates instantiated, EBNF operators
    turned into BNF alternatives, string terminals kept) and print it back as plain
    Lark with a `start` rule: same language, no templates/priorities/imports.
    Rules that derive only the empty string are dropped from the expansions using them;
    rules that may be empty are written as `[a | b]`."""
    import re

    from lark import Lark

    parser = Lark(text, parser="earley", lexer="dynamic", start=start)
    names: dict[tuple[bool, str], str] = {}
    used: set[str] = set()

    def name(sym_is_term: bool, raw: str) -> str:
        key = (sym_is_term, raw)
        if key not in names:
            base = re.sub(r"[^A-Za-z0-9_]", "_", raw).strip("_") or "x"
            base = base.upper() if sym_is_term else base.lower()
            if not sym_is_term and not base[0].isalpha():
                base = "r" + base
            if sym_is_term and not base[0].isalpha():
                base = "T" + base
            cand, i = base, 1
            while cand in used:
                i += 1
                cand = f"{base}_{i}"
            used.add(cand)
            names[key] = cand
        return names[key]

    alts: dict[str, list[list]] = {}
    for r in parser.rules:
        alts.setdefault(r.origin.name, []).append(list(r.expansion))
    # Rules that can only derive the empty string, to a fixpoint.
    only_empty: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n, exps in alts.items():
            if n not in only_empty and all(
                all((not s.is_term) and s.name in only_empty for s in e) for e in exps
            ):
                only_empty.add(n)
                changed = True
    lines = [f"start: {name(False, start)}"] if start != "start" else []
    for n, exps in alts.items():
        if n in only_empty:
            continue
        body, nullable = [], False
        for e in exps:
            syms = [s for s in e if s.is_term or s.name not in only_empty]
            if not syms:
                nullable = True
                continue
            body.append(" ".join(name(s.is_term, s.name) for s in syms))
        body = list(dict.fromkeys(body))
        rhs = " | ".join(body)
        lines.append(f"{name(False, n)}: " + (f"[{rhs}]" if nullable else rhs))
    for t in parser.terminals:
        p = t.pattern
        flags = "".join(sorted(p.flags))
        if p.type == "str":
            lit = json.dumps(p.value, ensure_ascii=False)
            lines.append(f"{name(True, t.name)}: {lit}{flags}")
        else:
            lines.append(f"{name(True, t.name)}: /{_escape_regex(p.value)}/{flags}")
    for ig in parser.ignore_tokens if hasattr(parser, "ignore_tokens") else parser.options.ignore:
        lines.append(f"%ignore {name(True, ig)}")
    return "\n".join(lines) + "\n"
