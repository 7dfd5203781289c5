"""Per keyword file of the JSON-Schema-Test-Suite: groups compiled / rejected with a
SchemaError, instances agreeing with the suite. Prints the README's Markdown table.

    python tools/json_schema_coverage.py [draft2020-12|draft7]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import gramgen  # noqa: E402
from gramgen.grammar.json_schema.loader import Resolver  # noqa: E402
from jsonschema_harness import BYTE_VOCAB, SUITE, accepts, compact, order_like_schema, remotes, suite_files  # noqa: E402

DRAFTS = {"draft7": 7, "draft2020-12": 2020}


def main() -> None:
    draft = sys.argv[1] if len(sys.argv) > 1 else "draft2020-12"
    refs = remotes()
    print(f"| {draft} file | groups compiled | rejected (SchemaError) | instances right | valid rejected | invalid accepted |")
    print("|---|---|---|---|---|---|")
    totals = [0] * 5
    for path in suite_files(draft):
        row = [0] * 5
        for group in json.loads(path.read_text()):
            try:
                cg = gramgen.compile(gramgen.Grammar.from_json_schema(group["schema"], refs=refs,
                                                                      draft=DRAFTS[draft]), BYTE_VOCAB)
            except (gramgen.SchemaError, gramgen.CompileLimitError):
                row[1] += 1
                continue
            row[0] += 1
            resolver = Resolver(group["schema"], DRAFTS[draft], refs)
            for case in group["tests"]:
                ok = accepts(cg, compact(order_like_schema(case["data"], resolver.root, resolver.resolve)))
                row[2] += ok == case["valid"]
                row[3] += case["valid"] and not ok
                row[4] += ok and not case["valid"]
        totals = [a + b for a, b in zip(totals, row)]
        name = path.relative_to(SUITE / "tests" / draft).as_posix()
        print(f"| {name} | " + " | ".join(map(str, row)) + " |")
    print("| **total** | " + " | ".join(f"**{v}**" for v in totals) + " |")


if __name__ == "__main__":
    main()
