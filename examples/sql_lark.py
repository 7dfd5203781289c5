"""Text-to-SQL constrained by the Lark grammar shipped as ``Grammar.builtin("sql")``: every output parses.

    python examples/sql_lark.py
"""

from __future__ import annotations

import lark

import gramgen
from gramgen.grammar.sources import builtin_grammar_text

QUESTIONS = [
    "Table users(id, name, age). Write one SQL query for the names of users older than 30.",
    "Table employees(id, name, salary). Write one SQL query for the average salary.",
]


def main() -> None:
    model = gramgen.load_model("smollm2")
    grammar = gramgen.Grammar.builtin("sql")
    parser = lark.Lark(builtin_grammar_text("sql"), parser="earley")
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
