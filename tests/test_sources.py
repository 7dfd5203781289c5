"""``gramgen.grammar.sources``: the one reader of a schema argument (each input form and
each error), grammar files by suffix, and the grammars shipped inside the package."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import gramgen
from gramgen.errors import ConfigurationError, GrammarError, SchemaError
from gramgen.grammar import builtin_grammars
from gramgen.grammar.sources import SchemaSource, read_schema

SCHEMA = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
KEY = json.dumps(SCHEMA)


# ------------------------------------------------------------------ input forms

def test_dict_is_taken_as_it_is():
    read = read_schema(SCHEMA)
    assert read.value is SCHEMA and read.model is None and read.key == KEY


@pytest.mark.parametrize("value", [True, False])
def test_bool(value):
    read = read_schema(value)
    assert read.value is value and read.key == json.dumps(value)


def test_json_text_str_and_bytes():
    text = "\n  " + json.dumps(SCHEMA, indent=2)
    assert read_schema(text).value == SCHEMA
    assert read_schema(text.encode()).value == SCHEMA
    assert read_schema("true").value is True and read_schema(" false\n").value is False
    assert read_schema(b" false ").value is False


def test_key_keeps_the_order_of_properties():
    """One schema written differently (indented text, a dict) has one key; the same
    properties in another order are another object layout, so another key."""
    assert read_schema(json.dumps(SCHEMA, indent=4)).key == read_schema(SCHEMA).key == KEY
    reordered = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert read_schema(reordered).key != KEY
    assert read_schema({"type": "string"}).key != KEY


def test_path_forms(tmp_path, monkeypatch):
    path = tmp_path / "person.schema.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    assert read_schema(path).value == SCHEMA                       # os.PathLike
    assert read_schema(str(path)).value == SCHEMA                  # str naming a file
    other = tmp_path / "schema.txt"                                # any suffix
    other.write_text("true", encoding="utf-8")
    assert read_schema(str(other)).value is True
    monkeypatch.chdir(tmp_path)
    assert read_schema("person.schema.json").value == SCHEMA      # relative to the cwd


def test_pydantic_model_class():
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    read = read_schema(Person)
    assert read.model is Person and read.value == Person.model_json_schema()
    assert read.key == json.dumps(Person.model_json_schema())


def test_a_schema_source_passes_through():
    read = read_schema(SCHEMA)
    assert read_schema(read) is read


def test_from_json_schema_reads_every_form(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    rules = {len(gramgen.Grammar.from_json_schema(form).ir.rules)
             for form in (SCHEMA, json.dumps(SCHEMA), json.dumps(SCHEMA).encode(), path, str(path), read_schema(SCHEMA))}
    assert len(rules) == 1
    assert gramgen.Grammar.from_file(path).ir.rules == gramgen.Grammar.from_json_schema(SCHEMA).ir.rules


# ------------------------------------------------------------------ errors

def test_malformed_json_gives_line_and_column():
    with pytest.raises(SchemaError, match=r"not valid JSON: .*\(line 3, column 5\)"):
        read_schema('{\n  "type": "object",\n    oops\n}')
    with pytest.raises(SchemaError, match=r"not valid JSON: .*\(line 1, column 2\)"):
        read_schema(b"{,}")


def test_malformed_json_file_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"type": }', encoding="utf-8")
    with pytest.raises(SchemaError, match=r"broken\.json is not valid JSON: .*line 1, column 10"):
        read_schema(path)
    with pytest.raises(SchemaError, match=r"broken\.json is not valid JSON"):
        read_schema(str(path))


@pytest.mark.parametrize("text", ["[1, 2]", "[]"])
def test_json_that_is_no_object_or_bool(text):
    with pytest.raises(SchemaError, match="must be an object or a boolean"):
        read_schema(text)


def test_str_that_is_neither_json_nor_a_file(tmp_path):
    with pytest.raises(SchemaError, match="neither JSON text nor an existing file"):
        read_schema("type: object")
    with pytest.raises(SchemaError, match="neither JSON text nor an existing file"):
        read_schema("x" * 5000)  # too long a name for the file system: not a file either
    with pytest.raises(SchemaError, match="neither JSON text nor an existing file") as info:
        read_schema("person")
    assert "'person'" in str(info.value)


def test_a_str_that_looks_like_a_path_is_read_as_one(tmp_path):
    """A str ending in .json or holding a separator (and no ``{``) is a path: a missing one
    says so, even when it starts like JSON (it said "not valid JSON" for ``[draft]/s.json``)."""
    missing = str(tmp_path / "missing.json")
    with pytest.raises(SchemaError, match="the schema file .*missing.json does not exist"):
        read_schema(missing)
    with pytest.raises(SchemaError, match=r"the schema file \[draft\]/person.json does not exist"):
        read_schema("[draft]/person.json")
    with pytest.raises(SchemaError, match="the schema file person.json does not exist"):
        read_schema("person.json")
    with pytest.raises(SchemaError, match="does not exist"):
        read_schema("schemas/person")
    deep = str(tmp_path.joinpath(*["folder"] * 30, "missing.json"))  # a long path: its end is kept
    with pytest.raises(SchemaError, match=r"\.\.\..*folder/missing\.json does not exist"):
        read_schema(deep)
    with pytest.raises(SchemaError, match="is a folder, not a file"):
        read_schema(str(tmp_path))
    # JSON text is still JSON text, whatever it holds
    with pytest.raises(SchemaError, match="list JSON"):
        read_schema('["a/b.json"]')
    assert read_schema('{"pattern": "a/b"}').value == {"pattern": "a/b"}
    with pytest.raises(SchemaError, match=r"not valid JSON: .*line 1, column 2"):
        read_schema("[oops")
    odd = tmp_path / "[x].json"  # an existing file whose name starts like JSON
    odd.write_text('{"type": "null"}')
    assert read_schema(str(odd)).value == {"type": "null"}


def test_missing_path_object(tmp_path):
    with pytest.raises(SchemaError, match="the schema file .*missing.json does not exist"):
        read_schema(tmp_path / "missing.json")
    with pytest.raises(SchemaError, match="is a folder"):
        read_schema(tmp_path)
    (tmp_path / "latin1.json").write_bytes(b'{"description": "caf\xe9"}')
    with pytest.raises(SchemaError, match="latin1.json is not UTF-8"):
        read_schema(tmp_path / "latin1.json")


def test_class_that_is_not_a_pydantic_model():
    class Person:
        name: str

    with pytest.raises(SchemaError, match="Person is a class but not a pydantic model"):
        read_schema(Person)


@pytest.mark.parametrize("value", [42, None, ["type", "object"], 1.5])
def test_other_types(value):
    with pytest.raises(SchemaError, match=f"cannot read a schema from {type(value).__name__}"):
        read_schema(value)  # type: ignore[arg-type]


def test_key_of_a_value_that_is_no_json_data():
    with pytest.raises(SchemaError, match="not JSON data"):
        SchemaSource({"enum": [{1, 2}]}).key


def test_schema_errors_reach_from_json_schema(tmp_path):
    with pytest.raises(SchemaError, match="nope.json does not exist"):
        gramgen.Grammar.from_json_schema(str(tmp_path / "nope.json"))
    with pytest.raises(SchemaError, match=r"line 1, column 2"):
        gramgen.Grammar.from_json_schema("{oops")


def test_bad_schema_options_are_configuration_errors():
    for options in ({"whitespace": "loose"}, {"property_order": "sorted"}, {"draft": 5}):
        with pytest.raises(ConfigurationError, match=next(iter(options))):
            gramgen.Grammar.from_json_schema(SCHEMA, **options)
    with pytest.raises(TypeError):
        gramgen.Grammar.from_json_schema(SCHEMA, white_space="flexible")  # type: ignore[call-arg]


# ------------------------------------------------------------------ grammar files

def test_grammar_files_by_suffix(tmp_path):
    lark = tmp_path / "g.lark"
    lark.write_text('start: "a"+\n', encoding="utf-8")
    gbnf = tmp_path / "g.gbnf"
    gbnf.write_text('top ::= "b"+\n', encoding="utf-8")
    assert gramgen.Grammar.from_file(lark).ir.source == str(lark)
    assert gramgen.Grammar.from_file(str(gbnf), start="top").ir.start == "top"
    with pytest.raises(GrammarError, match="unknown grammar file suffix '.txt'"):
        gramgen.Grammar.from_file(tmp_path / "g.txt")
    (tmp_path / "s.json").write_text('{"type": "null"}')
    with pytest.raises(ConfigurationError, match="start"):
        gramgen.Grammar.from_file(tmp_path / "s.json", start="root")


def test_missing_grammar_files_and_folders_are_configuration_errors(tmp_path):
    """Each names the path (a missing file was a GrammarError at 1:1, a folder an
    "unknown suffix ''")."""
    for name in ("missing.lark", "missing.gbnf", "missing.json"):
        with pytest.raises(ConfigurationError, match=f"the grammar file .*{name} does not exist"):
            gramgen.Grammar.from_file(tmp_path / name)
        with pytest.raises(ConfigurationError, match=f"{name} does not exist"):
            gramgen.Grammar.from_file(str(tmp_path / name))
    with pytest.raises(ConfigurationError, match=re.escape(f"{tmp_path} is a folder, not a file")):
        gramgen.Grammar.from_file(tmp_path)
    (tmp_path / "g.lark").mkdir()
    with pytest.raises(ConfigurationError, match="g.lark is a folder, not a file"):
        gramgen.Grammar.from_file(str(tmp_path / "g.lark"))
    with pytest.raises(ConfigurationError, match="str or os.PathLike"):
        gramgen.Grammar.from_file(None)  # type: ignore[arg-type]
    # a file that is not UTF-8: the line and column of the bad byte
    (tmp_path / "latin1.lark").write_bytes(b'start: "a"\n// caf\xe9\n')
    with pytest.raises(GrammarError, match=r"latin1.lark:2:7: the grammar file is not UTF-8"):
        gramgen.Grammar.from_file(tmp_path / "latin1.lark")


# ------------------------------------------------------------------ shipped grammars

def test_builtin_names():
    assert builtin_grammars() == ("json", "python", "python_subset", "sql")


@pytest.mark.parametrize("name", ["json", "python", "python_subset", "sql"])
def test_each_builtin_loads(name):
    g = gramgen.Grammar.builtin(name)
    assert isinstance(g, gramgen.Grammar) and g.ir.rules and g.ir.lexemes
    assert name in g.ir.source


def test_builtin_json_is_json():
    vocab = gramgen.Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
    m = gramgen.compile(gramgen.Grammar.builtin("json"), vocab).matcher()
    for b in b'{"a": [1, 2.5e3, null]}':
        m.advance(b)
    assert m.is_accepting()


def test_builtins_are_package_data():
    """The grammars lie inside the package (installed with it), not beside the repository;
    ``python`` is lark's own python.lark, from the installed lark package."""
    import lark

    folder = Path(gramgen.__file__).parent / "grammars"
    assert sorted([*(p.stem for p in folder.glob("*.lark")), "python"]) == list(builtin_grammars())
    assert (Path(lark.__file__).parent / "grammars" / "python.lark").is_file()


def test_unknown_builtin_lists_the_names():
    with pytest.raises(ConfigurationError, match="no builtin grammar 'yaml'.*json, python, python_subset, sql"):
        gramgen.Grammar.builtin("yaml")
