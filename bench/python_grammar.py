"""The shipped Python grammar on real files: acceptance, rejection, and editor latency.

    python -m bench.python_grammar                 # 150 files, 150 mutants (~15 min on 2 cores)
    python -m bench.python_grammar --files 40 --mutants 40

``Grammar.builtin("python")`` (lark's python.lark with its indenter) compiled for SmolLM2's
tokenizer, on a seeded sample of the standard library's ``.py`` files (those ``ast.parse``
accepts, with this interpreter):

* **accepted**: the share of the sample the grammar accepts (the file read whole, then
  the end of the text);
* **mutants rejected**: single-edit mutants of sampled files (a character deleted,
  duplicated or replaced by a bracket, quote, colon, ... ; a line indented by a few
  spaces) that ``ast.parse`` rejects; the share the grammar rejects too. lark's own LALR
  parser with its ``PythonIndenter`` is run on the same texts as a second opinion;
* **editor latency** at the end of a 1,000-line file: the first advance over it (cold), an
  edit near the end and a few typed characters (a :class:`~gramgen.Document` advances from
  the last line start they share), and the mask at the cursor.

Writes ``bench/results/PYTHON_GRAMMAR.md`` and ``bench/results/python_grammar.json``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import random
import time
import tokenize
from pathlib import Path

import gramgen

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED = ROOT.parent / "shared"


def stdlib_files() -> list[Path]:
    """Every ``.py`` file of this interpreter's standard library that ``ast.parse``
    accepts (test data with deliberate errors and site-packages left out)."""
    root = Path(os.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if "site-packages" in rel or "dist-packages" in rel or "__pycache__" in rel:
            continue
        try:
            ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
            continue
        out.append(path)
    return out


def read(path: Path) -> str:
    """A source file's text, decoded as Python does (a coding cookie, else UTF-8)."""
    with tokenize.open(path) as f:
        return f.read()


def mutate(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    kind = rng.randrange(4)
    if kind == 3:
        i = rng.randrange(len(lines))
        lines[i] = " " * rng.choice([1, 2, 3, 5]) + lines[i]
        return "\n".join(lines)
    i = rng.randrange(len(text))
    if kind == 0:
        return text[:i] + text[i + 1:]
    if kind == 1:
        return text[:i] + text[i] + text[i:]
    return text[:i] + rng.choice("():,.=[]{}'\"\\#") + text[i + 1:]


def accepts(cg, text: str) -> bool:
    m = cg.matcher()
    try:
        m.advance_text(text)
    except gramgen.TextRejected:
        return False
    return m.is_accepting()


def lark_parser():
    from lark import Lark
    from lark.indenter import PythonIndenter

    return Lark.open_from_package("lark", "python.lark", ["grammars"], parser="lalr",
                                  postlex=PythonIndenter(), start="file_input")


def lark_accepts(parser, text: str) -> bool:
    try:
        parser.parse(text if text.endswith("\n") else text + "\n")
        return True
    except Exception:
        return False


def editor_latency(cg, path: Path, lines: int = 1000) -> dict:
    text = "\n".join(read(path).split("\n")[:lines])
    cut = text.rfind("\n", 0, len(text) - 1) + 1   # the start of the last line
    head = text[:cut]
    while not _viable(cg, head):                    # a cut inside a statement: step back a line
        cut = head.rfind("\n", 0, len(head) - 1) + 1
        head = text[:cut]
    doc = gramgen.Document(cg)
    t0 = time.perf_counter()
    doc.update(head)
    first = time.perf_counter() - t0
    indent = len(head.rstrip("\n").split("\n")[-1]) - len(head.rstrip("\n").split("\n")[-1].lstrip())
    # an edit 20 lines above the cursor, then typing at the cursor
    above = head.split("\n")
    above.insert(max(0, len(above) - 20), " " * _indent_at(above, len(above) - 20) + "pass")
    edited = "\n".join(above)
    t0 = time.perf_counter()
    advanced = doc.bytes_advanced
    ok_edit = True
    try:
        doc.update(edited)
    except gramgen.TextRejected:
        ok_edit = False
        doc.update(head)
        edited = head
    edit = time.perf_counter() - t0
    edit_bytes = doc.bytes_advanced - advanced
    typed = edited + " " * indent + "x = "
    t0 = time.perf_counter()
    m = doc.update(typed)
    keystroke = time.perf_counter() - t0
    t0 = time.perf_counter()
    mask = m.mask()
    mask_s = time.perf_counter() - t0
    return {"file": str(path.name), "lines": head.count("\n"), "bytes": len(head.encode()),
            "first_advance_s": first, "edit_s": edit if ok_edit else None, "edit_bytes_advanced": edit_bytes,
            "keystroke_s": keystroke, "mask_s": mask_s, "allowed": int(mask.sum())}


def _indent_at(lines: list[str], i: int) -> int:
    i = max(0, min(i, len(lines) - 1))
    while i > 0 and not lines[i].strip():
        i -= 1
    return len(lines[i]) - len(lines[i].lstrip())


def _viable(cg, text: str) -> bool:
    m = cg.matcher()
    try:
        m.advance_text(text)
        return True
    except gramgen.TextRejected:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=150)
    ap.add_argument("--mutants", type=int, default=150)
    ap.add_argument("--max-bytes", type=int, default=60_000,
                    help="skip larger files (the matcher advances ~4 KB/s in Python)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)

    tokenizer_dir = SHARED / "tokenizers" / "smollm2"
    from transformers import AutoTokenizer

    vocab = gramgen.Vocabulary.from_huggingface(AutoTokenizer.from_pretrained(str(tokenizer_dir)))
    t0 = time.perf_counter()
    cg = gramgen.compile(gramgen.Grammar.builtin("python"), vocab)
    compile_s = time.perf_counter() - t0

    everything = stdlib_files()
    small = [p for p in everything if p.stat().st_size <= args.max_bytes]
    rng = random.Random(args.seed)
    sample = rng.sample(small, min(args.files, len(small)))
    parser = lark_parser()

    rows, t_start = [], time.perf_counter()
    for path in sample:
        text = read(path)
        t0 = time.perf_counter()
        ok = accepts(cg, text)
        rows.append({"file": str(path.relative_to(Path(os.__file__).parent)), "bytes": len(text.encode()),
                     "accepted": ok, "lark": lark_accepts(parser, text), "seconds": time.perf_counter() - t0})
        print(f"{'ok ' if ok else 'REJ'} {rows[-1]['file']} ({rows[-1]['bytes']} B, {rows[-1]['seconds']:.1f} s)",
              flush=True)
    mutants = []
    pool = [p for p in sample if 0 < p.stat().st_size <= args.max_bytes // 2] or sample
    while len(mutants) < args.mutants:
        path = rng.choice(pool)
        text = mutate(read(path), rng)
        try:
            ast.parse(text)
            continue   # still Python: not a test of rejection
        except (SyntaxError, ValueError):
            pass
        ours, lark = accepts(cg, text), lark_accepts(parser, text)
        mutants.append({"file": path.name, "rejected": not ours, "lark_rejected": not lark})
        if ours:
            print(f"mutant accepted: {path.name}", flush=True)
    big = max((p for p in everything if read(p).count("\n") >= 1000),
              key=lambda p: -abs(read(p).count("\n") - 1200), default=None)
    latency = editor_latency(cg, big) if big is not None else None

    accepted = sum(r["accepted"] for r in rows)
    rejected = sum(m["rejected"] for m in mutants)
    result = {
        "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "gramgen": gramgen.__version__,
        "tokenizer": "smollm2", "compile_s": compile_s, "seed": args.seed, "max_bytes": args.max_bytes,
        "stdlib_files": len(everything), "sample": len(rows), "accepted": accepted,
        "lark_accepted": sum(r["lark"] for r in rows), "mutants": len(mutants), "mutants_rejected": rejected,
        "mutants_lark_rejected": sum(m["lark_rejected"] for m in mutants),
        "seconds_total": time.perf_counter() - t_start,
        "bytes_per_second": sum(r["bytes"] for r in rows) / max(1e-9, sum(r["seconds"] for r in rows)),
        "editor": latency, "files": rows, "mutant_rows": mutants,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "python_grammar.json").write_text(json.dumps(result, indent=1))
    (out / "PYTHON_GRAMMAR.md").write_text(report(result))
    print(report(result))
    return 0


def report(r: dict) -> str:
    pct = lambda a, b: f"{100 * a / b:.1f} %" if b else "n/a"   # noqa: E731
    lines = [
        "# The shipped Python grammar on the standard library",
        "",
        f"`python -m bench.python_grammar` ({r['date']}, Python {r['python']}, {r['machine']}; "
        f"seed {r['seed']}). `Grammar.builtin(\"python\")` is lark's python.lark with its indenter, "
        f"compiled for SmolLM2's tokenizer in {r['compile_s']:.2f} s.",
        "",
        "| | files | gramgen | lark LALR + PythonIndenter |",
        "|---|---|---|---|",
        f"| stdlib files `ast.parse` accepts (sample of {r['sample']} of {r['stdlib_files']}, "
        f"each ≤ {r['max_bytes'] // 1000} KB) | {r['sample']} | accepted {r['accepted']} "
        f"({pct(r['accepted'], r['sample'])}) | accepted {r['lark_accepted']} ({pct(r['lark_accepted'], r['sample'])}) |",
        f"| single-edit mutants `ast.parse` rejects | {r['mutants']} | rejected {r['mutants_rejected']} "
        f"({pct(r['mutants_rejected'], r['mutants'])}) | rejected {r['mutants_lark_rejected']} "
        f"({pct(r['mutants_lark_rejected'], r['mutants'])}) |",
        "",
        f"Advancing over whole files: {r['bytes_per_second'] / 1000:.1f} KB/s (the Earley chart in Python).",
        "",
    ]
    rejected = [f["file"] for f in r["files"] if not f["accepted"]]
    if rejected:
        lines += ["Sample files the grammar rejects: " + ", ".join(f"`{f}`" for f in rejected), ""]
    accepted_mutants = [m["file"] for m in r["mutant_rows"] if not m["rejected"]]
    if accepted_mutants:
        lines += ["Mutants the grammar accepts (of): " + ", ".join(f"`{f}`" for f in accepted_mutants), ""]
    e = r.get("editor")
    if e:
        lines += [
            f"## Editor latency at the end of a {e['lines']}-line file (`{e['file']}`, {e['bytes']} bytes)",
            "",
            "| step | seconds |",
            "|---|---|",
            f"| first advance over the file (a Document, cold) | {e['first_advance_s']:.2f} |",
            f"| an edit 20 lines above the cursor (re-advanced {e['edit_bytes_advanced']} bytes) | "
            f"{e['edit_s']:.3f} |" if e["edit_s"] is not None else "| edit | n/a |",
            f"| typing at the cursor (`x = `) | {e['keystroke_s']:.3f} |",
            f"| the mask at the cursor ({e['allowed']} tokens allowed) | {e['mask_s']:.3f} |",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
