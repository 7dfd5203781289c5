"""Text-to-SQL constrained by a Lark grammar (grammars/sql.lark): every output parses.

    python examples/sql_lark.py
"""

from __future__ import annotations

from pathlib import Path

import lark

import gramgen

SQL = Path(__file__).resolve().parents[1] / "grammars" / "sql.lark"
QUESTIONS = [
    "Table users(id, name, age). Write one SQL query for the names of users older than 30.",
    "Table employees(id, name, salary). Write one SQL query for the average salary.",
]


def main() -> None:
    model = gramgen.load_model("smollm2")
    grammar = gramgen.Grammar.from_file(SQL)
    parser = lark.Lark(SQL.read_text(), parser="earley")
    for question in QUESTIONS:
        out = gramgen.generate(model, question, grammar=grammar, max_new_tokens=48)
        print(question)
        # sql.lark allows trailing comments, so a model that does not stop after `;` can
        # fill max_new_tokens with them: then the output is flagged incomplete
        print("  ->", out.text, f"[{out.finish_reason}]")
        if out.complete:
            parser.parse(out.text)   # never raises: the grammar constrained every token
            print("     parses with lark")


if __name__ == "__main__":
    main()
