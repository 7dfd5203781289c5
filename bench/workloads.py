"""Workloads: cases (a grammar or schema) plus the texts walked through each case.

json        src/gramgen/grammars/json.lark (gramgen; peers may use their builtin JSON grammar) + `valid`
            JSONSchemaBench instances (top-level object/array, `json.dumps` default separators)
python      src/gramgen/grammars/python_subset.lark (--python-grammar) + tests/data/python/*.py
jsonschema  JSONSchemaBench dev split (../shared/data/jsonschemabench/<category>/dev.jsonl):
            every library compiles each schema and walks its valid and invalid instances,
            serialized compactly with object keys in schema declaration order (see
            `schema_order`); quick: a seeded sample per category, full: all 3,411 schemas
lark        the Lark grammars in ../shared/data/lark/ with natural sample texts where there
            are any (tests/data/*, bench/data/lark/*); the others are compiled only
gbnf        the GBNF grammars in ../shared/data/gbnf/ likewise (bench/data/gbnf/*)
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the grammars shipped inside the package (Grammar.builtin)
BUILTIN_GRAMMARS = REPO / "src" / "gramgen" / "grammars"
SHARED = REPO.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"


@dataclass
class Text:
    id: str
    text: str
    expect: bool | None = None  # True valid, False invalid, None: unlabeled sample text
    jsonschema_valid: bool | None = None  # the `jsonschema` package's verdict, when known


@dataclass
class Case:
    """One grammar (or schema) and the texts walked through it."""

    id: str
    kind: str  # "lark" | "gbnf" | "jsonschema"
    source: str  # grammar text, or the schema as JSON text
    start: str
    path: str  # where it came from (for the report)
    texts: list[Text]
    category: str = ""

    @property
    def size(self) -> int:
        return len(self.source)

    def to_job(self) -> dict:
        return {"id": self.id, "kind": self.kind, "source": self.source, "start": self.start,
                "path": self.path}


@dataclass
class Workload:
    name: str
    cases: list[Case]
    source: str  # where the texts came from
    notes: list[str] = field(default_factory=list)
    reps: bool = True  # repeat compiles (single-grammar workloads); else one compile per case

    def describe(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "n_cases": len(self.cases),
            "n_texts": sum(len(c.texts) for c in self.cases),
            "notes": self.notes,
            "cases": [
                {"id": c.id, "kind": c.kind, "path": c.path, "size": c.size, "category": c.category,
                 "texts": [{"id": t.id, "chars": len(t.text), "expect": t.expect,
                            "jsonschema_valid": t.jsonschema_valid} for t in c.texts]}
                for c in self.cases
            ],
        }


@dataclass
class Sizes:
    json_n: int
    json_max_chars: int
    python_n: int
    python_max_chars: int
    schemas_per_category: int | None  # None = all
    instances_per_schema: int | None  # per label (valid / invalid); None = all
    instance_max_chars: int | None
    grammar_texts: int | None  # texts per Lark/GBNF grammar; None = all
    grammar_text_max_chars: int | None
    schema_max_chars: int | None = None  # sample only schemas up to this size (quick)


QUICK = Sizes(json_n=24, json_max_chars=1500, python_n=2, python_max_chars=2500,
              schemas_per_category=1, instances_per_schema=2, instance_max_chars=1500,
              grammar_texts=1, grammar_text_max_chars=1200, schema_max_chars=2500)
FULL = Sizes(json_n=200, json_max_chars=20000, python_n=10_000, python_max_chars=10**9,
             schemas_per_category=None, instances_per_schema=None, instance_max_chars=None,
             grammar_texts=None, grammar_text_max_chars=None)


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


def _jsb_records(root: Path):
    """(category, [records]) per category file of the JSONSchemaBench dev split."""
    for f in sorted(root.glob("*/dev.jsonl")):
        recs = [json.loads(line) for line in f.read_text(encoding="utf-8").split("\n") if line.strip()]
        yield f.parent.name, recs


def load_json(grammar: Path, n: int, max_chars: int, seed: int) -> Workload:
    root = SHARED / "data" / "jsonschemabench"
    rng = random.Random(seed)
    per_cat: list[list[Text]] = []
    for _cat, recs in _jsb_records(root):
        pool = []
        for rec in recs:
            for i, t in enumerate(rec.get("tests") or []):
                if not t.get("valid") or not isinstance(t.get("data"), (dict, list)):
                    continue
                s = json.dumps(t["data"])
                if len(s) <= max_chars:
                    pool.append(Text(f"{rec['id']}#{i}", s, True))
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
    case = Case(_rel(grammar), "lark", text, _start_rule(text, "start"), _rel(grammar), texts)
    return Workload("json", [case], _rel(root) + "/*/dev.jsonl", notes)


def load_python(grammar: Path, texts_dir: Path, n: int, max_chars: int, seed: int) -> Workload:
    text = _read_grammar(grammar)
    files = sorted(p for p in texts_dir.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.py files in {texts_dir} (yet?)")
    pool = [Text(p.name, p.read_text(encoding="utf-8"), True) for p in files]
    pool = [t for t in pool if len(t.text) <= max_chars] or pool[:1]
    if len(pool) > n:
        pool = sorted(random.Random(seed).sample(pool, n), key=lambda t: t.id)
    case = Case(_rel(grammar), "lark", text, _start_rule(text, "file_input"), _rel(grammar), pool)
    return Workload(
        "python", [case], _rel(texts_dir) + "/*.py",
        [f"{len(pool)} of {len(files)} files (at most {max_chars} chars); seed {seed}"],
    )


# --------------------------------------------------------------------------------------
# JSON Schema
# --------------------------------------------------------------------------------------
def schema_order(instance, schema, validator):
    """`instance` with every object's keys in the declaration order of the (sub)schema that
    describes it: declared `properties` first (following local `$ref`, `allOf`, and the
    first `anyOf`/`oneOf` branch the value is valid against), other keys after them in
    their original order.  Most compilers (xgrammar, llguidance, outlines, gramgen) emit
    properties in declaration order, so this is the serialization they can all accept;
    key order does not change validity."""

    def resolve(s, depth=0):
        while isinstance(s, dict) and "$ref" in s and depth < 50:
            try:
                s = validator.evolve(schema=s)._resolver.lookup(s["$ref"]).contents \
                    if hasattr(validator, "_resolver") else s
            except Exception:  # noqa: BLE001 - an unresolvable ref: keep the original order
                return {}
            depth += 1
        return s if isinstance(s, dict) else {}

    def branches(s):
        out = [s]
        for sub in s.get("allOf", []) or []:
            out += branches(resolve(sub))
        for key in ("anyOf", "oneOf"):
            for sub in s.get(key, []) or []:
                sub = resolve(sub)
                try:
                    ok = validator.evolve(schema=sub).is_valid(cur[0])
                except Exception:  # noqa: BLE001
                    ok = False
                if ok:
                    out += branches(sub)
                    break
        return out

    cur = [None]

    def walk(x, s, depth=0):
        s = resolve(s)
        if depth > 60 or not s:
            return x
        cur[0] = x
        parts = branches(s)
        if isinstance(x, dict):
            order: list[str] = []
            props: dict = {}
            for p in parts:
                for k, v in (p.get("properties") or {}).items():
                    if k not in props:
                        props[k] = v
                        order.append(k)
            keys = [k for k in order if k in x] + [k for k in x if k not in props]
            out = {}
            for k in keys:
                sub = props.get(k)
                if sub is None:
                    for p in parts:
                        for pat, ps in (p.get("patternProperties") or {}).items():
                            try:
                                if re.search(pat, k):
                                    sub = ps
                                    break
                            except re.error:
                                pass
                        if sub is None and isinstance(p.get("additionalProperties"), dict):
                            sub = p["additionalProperties"]
                        if sub is not None:
                            break
                out[k] = walk(x[k], sub, depth + 1) if isinstance(sub, dict) else x[k]
            return out
        if isinstance(x, list):
            prefix, items = [], None
            for p in parts:
                if isinstance(p.get("prefixItems"), list):
                    prefix = p["prefixItems"]
                    items = p.get("items")
                elif isinstance(p.get("items"), list):  # draft 4-7 tuple form
                    prefix = p["items"]
                    items = p.get("additionalItems")
                elif isinstance(p.get("items"), dict) and items is None:
                    items = p["items"]
            return [walk(v, prefix[i] if i < len(prefix) else items, depth + 1)
                    if isinstance(prefix[i] if i < len(prefix) else items, dict) else v
                    for i, v in enumerate(x)]
        return x

    return walk(instance, schema)


def _validator(schema):
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def serialize_instance(data, schema) -> tuple[str, bool | None]:
    """Compact JSON text of an instance, keys in schema order; and jsonschema's verdict."""
    try:
        v = _validator(schema)
        ordered = schema_order(data, schema, v)
        verdict = bool(v.is_valid(data))
    except Exception:  # noqa: BLE001 - a schema jsonschema can't handle: original order
        ordered, verdict = data, None
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False), verdict


def load_jsonschema(sizes: Sizes, seed: int) -> Workload:
    root = SHARED / "data" / "jsonschemabench"
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist")
    cases: list[Case] = []
    for cat, recs in _jsb_records(root):
        recs = [r for r in recs if isinstance(r.get("schema"), (dict, bool))]
        if sizes.schema_max_chars is not None:
            recs = [r for r in recs if len(json.dumps(r["schema"])) <= sizes.schema_max_chars]
        k = sizes.schemas_per_category
        if k is not None:
            # schemas with at least one valid instance first, so the sample walks something
            rng = random.Random(f"{seed}/{cat}")
            rng.shuffle(recs)
            recs.sort(key=lambda r: not any(t.get("valid") for t in r.get("tests") or []))
            recs = recs[:k]
        for rec in recs:
            schema = rec["schema"]
            texts = []
            for label in (True, False):
                pool = [(i, t) for i, t in enumerate(rec.get("tests") or []) if bool(t.get("valid")) == label]
                picked = []
                for i, t in pool:
                    s, verdict = serialize_instance(t.get("data"), schema)
                    if sizes.instance_max_chars is not None and len(s) > sizes.instance_max_chars:
                        continue
                    picked.append(Text(f"{rec['id']}#{i}", s, label, verdict))
                    if sizes.instances_per_schema is not None and len(picked) >= sizes.instances_per_schema:
                        break
                texts += picked
            cases.append(Case(str(rec["id"]), "jsonschema", json.dumps(schema), "", f"{cat}/{rec['id']}",
                              texts, cat))
    per = "all" if sizes.schemas_per_category is None else f"{sizes.schemas_per_category} per category (seed {seed})"
    if sizes.schema_max_chars is not None:
        per += f" among those of ≤ {sizes.schema_max_chars} chars"
    inst = "all" if sizes.instances_per_schema is None else (
        f"≤ {sizes.instances_per_schema} valid + ≤ {sizes.instances_per_schema} invalid of ≤ "
        f"{sizes.instance_max_chars} chars per schema")
    return Workload(
        "jsonschema", cases, _rel(root) + "/*/dev.jsonl",
        [f"schemas: {per}; instances: {inst}",
         "instances serialized compactly (`,` `:`), object keys reordered to schema declaration "
         "order (bench.workloads.schema_order), ensure_ascii=False; each library compiles with "
         "flexible whitespace (see the policy table)"],
        reps=False,
    )


# --------------------------------------------------------------------------------------
# Lark and GBNF grammar collections
# --------------------------------------------------------------------------------------
def _files(pattern_dir: Path, glob: str) -> list[Path]:
    return sorted(p for p in pattern_dir.glob(glob) if p.is_file())


def _json_texts(max_chars: int | None, plain_strings: bool) -> list[Text]:
    """tests/data/json documents with an object at the top, compact; `plain_strings`: only
    those whose strings are printable ASCII without escapes (grammars that lack them)."""
    out = []
    for p in _files(REPO / "tests" / "data" / "json", "*.json"):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        s = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        if plain_strings and (not s.isascii() or "\\" in s or '""' in s):
            continue
        if max_chars is None or len(s) <= max_chars:
            out.append(Text(p.name, s))
    return out


def _file_texts(paths: list[Path], max_chars: int | None) -> list[Text]:
    out = []
    for p in paths:
        s = p.read_text(encoding="utf-8")
        if max_chars is None or len(s) <= max_chars:
            out.append(Text(_rel(p), s))
    return out


def _pick(texts: list[Text], n: int | None) -> list[Text]:
    return texts if n is None else texts[:n]


def lark_label(grammar: str, start: str, text: Text, import_dir: Path) -> Text:
    """`text` labeled by lark itself (the reference implementation of the Lark language;
    Earley with the dynamic lexer, its most general mode): valid if lark parses it, invalid
    if lark rejects it, unlabeled if lark cannot build this grammar (e.g. `%declare`d
    terminals that need a postlexer, such as Python's indentation)."""
    if re.search(r"^\s*%declare\b", grammar, re.M):
        return text  # its %declare-d terminals come from a postlexer lark is not given here
    parser = _lark_parser(grammar, start, str(import_dir))
    if parser is None:
        return text
    try:
        parser.parse(text.text)
        ok = True
    except Exception:  # noqa: BLE001 - lark's UnexpectedInput and friends
        ok = False
    return Text(text.id, text.text, ok, None)


_LARK_PARSERS: dict = {}


def _lark_parser(grammar: str, start: str, import_dir: str):
    key = (grammar, start)
    if key not in _LARK_PARSERS:
        try:
            from lark import Lark

            _LARK_PARSERS[key] = Lark(grammar, parser="earley", lexer="dynamic", start=start,
                                      import_paths=[import_dir, str(SHARED / "data" / "lark" / "lark-1.3.1")])
        except Exception:  # noqa: BLE001 - lark cannot build it: no labels from lark
            _LARK_PARSERS[key] = None
    return _LARK_PARSERS[key]


def load_lark(sizes: Sizes) -> Workload:
    base = SHARED / "data" / "lark"
    if not base.is_dir():
        raise FileNotFoundError(f"{base} does not exist")
    mx = sizes.grammar_text_max_chars
    py = _file_texts(_files(REPO / "tests" / "data" / "python", "*.py"), mx)
    samples = {
        "syncode/json.lark": _json_texts(mx, plain_strings=True),
        "syncode/python.lark": py,
        "syncode/sql.lark": _file_texts(_files(REPO / "tests" / "data" / "sql", "*.sql"), mx),
        "syncode/calc.lark": _file_texts([DATA / "lark" / "calc.txt"], mx),
        "syncode/c.lark": _file_texts([DATA / "lark" / "c.c"], mx),
        "syncode/go.lark": _file_texts([DATA / "lark" / "go.go"], mx),
        "syncode/java.lark": _file_texts([DATA / "lark" / "java.java"], mx),
        "lark-1.3.1/python.lark": py,
        "lark-1.3.1/lark.lark": _file_texts([BUILTIN_GRAMMARS / "json.lark"], None),
    }
    cases = []
    for p in _files(base, "*/*.lark"):
        rel = str(p.relative_to(base))
        text = p.read_text(encoding="utf-8")
        start = _start_rule(text, "file_input")
        if start != "start" and "file_input" not in text:
            continue  # a library of rules to %import (common.lark, unicode.lark): no start rule
        texts = [lark_label(text, start, t, p.parent) for t in samples.get(rel, [])]
        texts = [t for t in texts if t.expect is not False] + [t for t in texts if t.expect is False]
        cases.append(Case(rel, "lark", text, start, _rel(p), _pick(texts, sizes.grammar_texts)))
    return Workload("lark", cases, _rel(base) + "/*/*.lark",
                    ["texts: tests/data/{json,python,sql}, bench/data/lark/*, labeled valid/invalid "
                     "by lark itself (Earley, dynamic lexer) where lark can build the grammar, "
                     "valid ones first; grammars without sample texts are compiled only", "common.lark / unicode.lark are %import "
                     "libraries without a start rule: not run"], reps=False)


def load_gbnf(sizes: Sizes) -> Workload:
    base = SHARED / "data" / "gbnf"
    if not base.is_dir():
        raise FileNotFoundError(f"{base} does not exist")
    mx = sizes.grammar_text_max_chars
    d = DATA / "gbnf"
    json_any = _json_texts(mx, plain_strings=False)
    json_plain = _json_texts(mx, plain_strings=True)
    samples = {
        "llama.cpp/json.gbnf": json_any,
        "llama.cpp/arithmetic.gbnf": _file_texts([d / "arithmetic.txt"], mx),
        "llama.cpp/chess.gbnf": _file_texts([d / "chess.txt"], mx),
        "llama.cpp/list.gbnf": _file_texts([d / "list.txt"], mx),
        "llama.cpp/english.gbnf": _file_texts([d / "english.txt"], mx),
        "llama.cpp/japanese.gbnf": _file_texts([d / "japanese.txt"], mx),
        "llama.cpp/c.gbnf": _file_texts([d / "c.txt"], mx),
        "transformers-cfg/json.ebnf": json_plain,
        "transformers-cfg/arithmetic.ebnf": _file_texts([d / "arithmetic.txt"], mx),
        "transformers-cfg/chess.ebnf": _file_texts([d / "chess.txt"], mx),
        "transformers-cfg/balanced_parentheses.ebnf": _file_texts([d / "balanced_parentheses.txt"], mx),
        "transformers-cfg/SMILES/generic.ebnf": _file_texts([d / "smiles.txt"], mx),
    }
    cases = []
    for p in sorted(q for q in base.rglob("*") if q.suffix in (".gbnf", ".ebnf") and q.is_file()):
        rel = str(p.relative_to(base))
        texts = _pick(samples.get(rel, []), sizes.grammar_texts)
        if sizes.grammar_texts is not None and not texts:
            continue  # quick: only grammars with sample texts
        cases.append(Case(rel, "gbnf", p.read_text(encoding="utf-8"), "root", _rel(p), texts))
    return Workload("gbnf", cases, _rel(base) + "/**/*.{gbnf,ebnf}",
                    ["texts: tests/data/json, bench/data/gbnf/* (unlabeled samples: a grammar may "
                     "restrict the language, e.g. llama.cpp's JSON caps number digits); quick: only "
                     "grammars with sample texts, full: all grammars (the others compiled only)"],
                    reps=False)


WORKLOADS = ("json", "python", "jsonschema", "lark", "gbnf")


def load(name: str, args, sizes: Sizes) -> Workload:
    if name == "json":
        return load_json(Path(args.json_grammar), sizes.json_n, sizes.json_max_chars, args.seed)
    if name == "python":
        return load_python(Path(args.python_grammar), Path(args.python_texts),
                           sizes.python_n, sizes.python_max_chars, args.seed)
    if name == "jsonschema":
        return load_jsonschema(sizes, args.seed)
    if name == "lark":
        return load_lark(sizes)
    if name == "gbnf":
        return load_gbnf(sizes)
    raise SystemExit(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


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
