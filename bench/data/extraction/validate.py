"""Check the extraction dataset: schemas, gold values, and that every gold value is stated in its text.

Run from anywhere: python bench/data/extraction/validate.py  (needs jsonschema).
Exits non-zero and lists the problems if any check fails.
"""
import json
import re
import sys
from pathlib import Path

import jsonschema

HERE = Path(__file__).resolve().parent
STEMS = ("person", "paper", "product")
ALLOWED_KEYWORDS = {"type", "enum", "required", "properties", "title", "description"}
README_PERSONS = [
    "Marie Curie (born 1867 in Warsaw) was a physicist and chemist.",
    "Grace Hopper, born in New York City in 1906, was a computer scientist and US Navy rear admiral.",
    "Alan Turing was a mathematician born in London in 1912.",
    "Ada Lovelace, a mathematician, was born in London in 1815.",
]
CURRENCY_MARKS = {"USD": ("$", "USD"), "EUR": ("€", "EUR"), "GBP": ("£", "GBP"), "JPY": ("¥", "JPY")}
NEGATIVE_STOCK = ("out of stock", "sold out", "not in stock")


def schema_keywords(node):
    """Every keyword used in the schema, descending into properties."""
    seen = set(node)
    for sub in node.get("properties", {}).values():
        seen |= schema_keywords(sub)
    return seen


def number_stated(value, text):
    plain = text.replace(",", "")  # thousands separators: "€1,299" states 1299
    if isinstance(value, float) and not value.is_integer():
        return re.search(r"(?<![\d.])" + re.escape(repr(value)) + r"0*(?!\d)", plain) is not None
    return re.search(r"(?<![\d.])" + str(int(value)) + r"(\.0+)?(?![\d])", plain) is not None


def main():
    problems, summary = [], []
    for stem in STEMS:
        schema = json.loads((HERE / f"{stem}.schema.json").read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(schema)
        extra = schema_keywords(schema) - ALLOWED_KEYWORDS
        if extra:
            problems.append(f"{stem}.schema.json: keywords outside the allowed set: {sorted(extra)}")
        if set(schema["required"]) != set(schema["properties"]):
            problems.append(f"{stem}.schema.json: not every property is required")
        validator = jsonschema.Draft202012Validator(schema)
        props = list(schema["properties"])
        rows = [json.loads(line) for line in (HERE / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        ids = [r["id"] for r in rows]
        if ids != [f"{stem}-{i:02d}" for i in range(1, len(rows) + 1)]:
            problems.append(f"{stem}.jsonl: ids are not {stem}-01..{stem}-{len(rows):02d} in order")
        if len(rows) != 20:
            problems.append(f"{stem}.jsonl: {len(rows)} documents, expected 20")
        counts = {"string": 0, "number": 0, "boolean": 0}
        for r in rows:
            rid, text, gold = r["id"], r["text"], r["gold"]
            if set(r) != {"id", "text", "gold"}:
                problems.append(f"{rid}: keys {sorted(r)}")
            for err in validator.iter_errors(gold):
                problems.append(f"{rid}: gold invalid: {err.message}")
            if list(gold) != props:
                problems.append(f"{rid}: gold keys {list(gold)} != schema order {props}")
            for key, value in gold.items():
                if isinstance(value, bool):
                    counts["boolean"] += 1
                    low = text.lower()
                    negative = any(p in low for p in NEGATIVE_STOCK)
                    if value == negative or (value and "in stock" not in low):
                        problems.append(f"{rid}: {key}={value} does not match the stock wording")
                elif isinstance(value, (int, float)):
                    counts["number"] += 1
                    if not number_stated(value, text):
                        problems.append(f"{rid}: {key}={value!r} is not stated in digits in the text")
                else:
                    counts["string"] += 1
                    if key == "currency":
                        if not any(m in text for m in CURRENCY_MARKS[value]):
                            problems.append(f"{rid}: currency {value} has no symbol or code in the text")
                        others = [c for c in CURRENCY_MARKS if c != value and any(m in text for m in CURRENCY_MARKS[c])]
                        if others:
                            problems.append(f"{rid}: text also mentions currency {others}")
                    elif value not in text:
                        problems.append(f"{rid}: {key}={value!r} does not occur verbatim in the text")
        if stem == "person":
            for i, expected in enumerate(README_PERSONS):
                if rows[i]["text"] != expected:
                    problems.append(f"{rows[i]['id']}: text differs from the README example {expected!r}")
        words = [len(r["text"].split()) for r in rows]
        summary.append(f"{stem:8s} {len(rows):3d} docs  {len(props)} fields  values checked: "
                       f"{counts['string']} strings, {counts['number']} numbers, {counts['boolean']} booleans  "
                       f"text length {min(words)}-{max(words)} words")
    print("\n".join(summary))
    if problems:
        print(f"\n{len(problems)} problem(s):")
        print("\n".join("  " + p for p in problems))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
