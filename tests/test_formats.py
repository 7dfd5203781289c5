"""``format`` languages, as documented in :func:`gramgen.grammar.json_schema.strings.format_regex`.

Each table is written from the format's RFC by hand (not from another validator): values
the RFC allows and we accept, values it forbids, and valid values we deliberately leave
out (the documented subset). Every rejected-but-valid value is named as such, so a change
that widens or narrows a format shows up here.
"""

from __future__ import annotations

import json

import pytest

import gramgen
from gramgen.grammar import cpdfa
from gramgen.grammar.json_schema import strings
from jsonschema_harness import BYTE_VOCAB, accepts

ACCEPT = {
    "hostname": ["example", "www.example.com", "a", "1host", "host-name", "a--b.com",
                 "ab--cd", "ab--cd.example", "x.ab--cd", "xn-a.com", "a" * 30 + ".com",
                 ".".join(["a"] * 8)],
    "idn-hostname": ["example", "www.example.com", "a--b.com", "xn-a.com", "host-name"],
    "email": ["joe.bloggs@example.com", "a@b", "te~st@example.com", "~test@example.com",
              "a!#$%&'*+/=?^_`{|}~-@x.org", "te.s.t@example.com", "a@[127.0.0.1]",
              "joe.bloggs@[127.0.0.1]", "a@[0.0.0.0]", "a@[255.255.255.255]", "a@[IPv6:::1]",
              "joe.bloggs@[IPv6:::1]", "a@[ipv6:::1]", "a@[IPv6:1:2:3:4:5:6:7:8]",
              "a@[IPv6:1:2:3:4:5::6]", "a@[IPv6:::]", "a@[IPv6:1::]",
              "a@[IPv6:1:2:3:4:5:6:1.2.3.4]", "a@[IPv6:::ffff:1.2.3.4]", "a@[IPv6:1:2:3::4:1.2.3.4]",
              '"joe bloggs"@example.com', '"joe..bloggs"@example.com', '"joe@bloggs"@example.com',
              '"a\\"b"@example.com', '"a\\\\b"@example.com', "a@ab--cd.example",
              "x" * 64 + "@example.com", '"' + "x" * 62 + '"@example.com'],
    "ipv4": ["0.0.0.0", "127.0.0.1", "255.255.255.255", "1.22.133.244"],
    "ipv6": ["::", "::1", "1::", "1:2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6::8", "::ffff:1.2.3.4",
             "fe80::1", "ABCD:ef01::"],
    "date": ["2024-02-29", "2000-02-29", "2023-12-31", "0001-01-01", "2023-04-30"],
    "time": ["08:30:06Z", "08:30:06.283185z", "23:59:59+23:59", "00:00:00-00:00"],
    "date-time": ["1963-06-19T08:30:06.283185Z", "1963-06-19t08:30:06z", "2024-02-29T00:00:00+01:00"],
    "duration": ["P4DT12H30M5S", "P1Y", "P1M", "P2W", "PT1H", "PT36H", "P1Y2M3D", "PT0S"],
    "uuid": ["2EB8AA08-AA98-11EA-B4AA-73B441D16380", "2eb8aa08-aa98-11ea-b4aa-73b441d16380",
             "00000000-0000-0000-0000-000000000000"],
    "uri": ["http://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c", "ftp://[::1]:21/",
            "http://user:pw@host:8080/p%20q", "a:"],
    "uri-reference": ["/path", "#frag", "", "../a?b", "http://x.y/"],
    "json-pointer": ["", "/", "/a/b", "/a~0b/c~1d", "//"],
    "relative-json-pointer": ["0", "1", "120/foo/bar", "0#", "0//", "100"],
    "uri-template": ["http://example.com/{id}", "{+path}/here", "{?x,y}", "/a{/b*}", "plain"],
}

REJECT_INVALID = {  # the RFC forbids these
    "hostname": ["", ".", ".example", "example.", "-hostname", "hostname-", "host_name", "a..b",
                 "example.com\n", "exa mple", "\u212aelvin.example.com", "example\uff0ecom"],
    "idn-hostname": ["", "-a", "a-", "a..b", "example.", "ab--cd", "XN--aa---o47jg78q"],
    "email": ["2962", "@example.com", "joe.bloggs@", ".test@example.com", "test.@example.com",
              "te..st@example.com", "joe.bloggs@invalid=domain.com", "joe.bloggs@[127.0.0.300]",
              "joe bloggs@example.com", "user1@oceania.org, user2@oceania.org",
              '"Winston Smith" <winston.smith@recdep.minitrue> (Records Department)',
              "a@[127.0.0.1", "a@127.0.0.1]", "a@[IPv6:1:2:3:4:5:6:7]", "a@[IPv6:1:2:3:4:5:6:7:8:9]",
              "a@[IPv6:1::2::3]", "a@[IPv6:12345::]", "a@[1.2.3]", "a@[::1]", "a@[IPv4:1.2.3.4]",
              '"a"b"@example.com', '"a\\"@example.com', '"\u00e9"@example.com', "a@-b.com",
              "x" * 65 + "@example.com", "a@@b"],
    "ipv4": ["256.0.0.0", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.4 ", "\u0661.2.3.4"],
    "ipv6": [":::", "1:2:3:4:5:6:7:8:9", "12345::", "1::2::3", "::1 ", "1:2:3:4:5:6:7"],
    "date": ["2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-1-01", "20230101"],
    "time": ["24:00:00Z", "08:60:00Z", "08:30:06", "08:30:06+24:00", "8:30:06Z"],
    "date-time": ["1963-06-19 08:30:06Z", "1963-06-19T08:30:06", "1963-06-19"],
    "duration": ["P", "PT", "P1D2H", "P1W1D", "P1.5D", "1D", "PT1D"],
    "uuid": ["2eb8aa08-aa98-11ea-b4aa-73b441d1638", "2eb8aa08aa9811eab4aa73b441d16380", "g" * 32],
    "uri": ["//example.com", "/path", "http://exa mple.com", "\\\\WINDOWS\\share", "1http://x"],
    "uri-reference": ["\\\\WINDOWS\\fileshare", "#frag#", "a b"],
    "json-pointer": ["a", "/~2", "/a~", "#/a"],
    "relative-json-pointer": ["/foo", "-1/a", "+1/a", "01/a", "0##", "", "1#/a", "1\n"],
    "uri-template": ["{", "{x", "{x y}", "}"],
}

REJECT_LEFT_OUT = {  # valid under the RFC, outside the documented subset
    "hostname": ["a" * 31 + ".com", ".".join(["a"] * 9), "xn--9n2bp8q.xn--9t4b11yi5a", "XN--ab-cd"],
    "idn-hostname": ["\uc2e4\ub840.\ud14c\uc2a4\ud2b8", "xn--ihqwcrb4cv8a8dqg056pqjye"],
    "email": ['""@example.com', "a@[IPv6:1:2:3:4:5:6::7]", "a@[127.0.0.01]", "a@[tag:content]",
              "a@xn--9n2bp8q.com", "\u00e9@example.com"],
    "time": ["23:59:60Z"],
    "ipv6": ["fe80::1%eth0"],
    "iri": ["http://\u00e9xample.com/"],
    "relative-json-pointer": ["0+1"],
}


def _dfa(name: str) -> cpdfa.CodepointDFA:
    return cpdfa.from_regex(strings.format_regex(name))


def _cases(table: dict[str, list[str]]):
    return [pytest.param(name, value, id=f"{name}:{value[:40]!r}") for name, values in table.items()
            for value in values]


@pytest.mark.parametrize("name, value", _cases(ACCEPT))
def test_accepted(name, value):
    assert _dfa(name).matches(value)


@pytest.mark.parametrize("name, value", _cases(REJECT_INVALID) + _cases(REJECT_LEFT_OUT))
def test_rejected(name, value):
    assert not _dfa(name).matches(value)


def test_idn_formats_follow_their_ascii_forms():
    for name, ascii_name in (("idn-email", "email"), ("iri", "uri"), ("iri-reference", "uri-reference")):
        for value in ACCEPT.get(ascii_name, []):
            assert _dfa(name).matches(value), (name, value)


@pytest.mark.parametrize("fmt, value, valid", [
    ("email", "a@[127.0.0.1]", True),           # RFC 5321 address literal (issue 20, point 10)
    ("email", "a@[IPv6:::1]", True),
    ("email", "a@[127.0.0.300]", False),
    ("hostname", "ab--cd", True),               # "--" in positions 3-4 of a label that is no A-label
    ("hostname", "xn--ab", False),              # an A-label: its punycode is not checked, so left out
    ("idn-hostname", "ab--cd", False),          # RFC 5891 4.2.3.1
])
def test_issue_examples_through_the_compiled_grammar(fmt, value, valid):
    cg = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "string", "format": fmt}), BYTE_VOCAB)
    assert accepts(cg, json.dumps(value).encode()) is valid


def test_every_format_has_a_row_in_the_documented_table():
    doc = strings.format_regex.__doc__
    for name in strings.FORMAT_NAMES:
        assert any(line.split()[:1] == [name] or line.startswith(name + ",") or f", {name} " in line
                   for line in doc.splitlines() for line in [line.strip()]), name


def test_a_formats_automata_are_made_once_and_kept():
    """A format's code-point automaton, its JSON spelling and the DFA of that spelling are
    constants: made at the format's first use and kept through ``clear_all`` (which cold
    compiles call), shared by every property and schema that uses the format; and they are
    what a fresh build of the format gives."""
    from gramgen._lru import clear_all
    from gramgen.automata import dfa as dfa_module
    from gramgen.grammar.ir import CONSTANT_LEXEMES

    def compiled(schema):
        clear_all()
        return gramgen.compile(gramgen.Grammar.from_json_schema(schema), BYTE_VOCAB)

    first = compiled({"type": "object", "properties": {"a": {"type": "string", "format": "uri"},
                                                       "b": {"type": "string", "format": "uri"}}})
    names = list(first.grammar.ir.meta[CONSTANT_LEXEMES])
    assert len(names) == 1   # (the two properties share the format's one lexeme)
    second = compiled({"type": "array", "items": {"type": "string", "format": "uri"}})
    (other,) = second.grammar.ir.meta[CONSTANT_LEXEMES]
    rx = first.grammar.ir.lexemes[names[0]]
    assert second.grammar.ir.lexemes[other] is rx is strings.spelled(strings.format_dfa("uri"))

    def dfa_of(c, name):
        return c.tables.lex_dfas[c.tables.lexeme_names.index(name)]

    assert dfa_of(second, other) is dfa_of(first, names[0])
    fresh = dfa_module._compile_regex(rx, 10_000)
    assert (fresh.transitions == dfa_of(first, names[0]).transitions).all()
    assert cpdfa.from_regex(strings.format_regex("uri")).edges == strings.format_dfa("uri").edges
    # a format with more: its own lexeme, not kept
    bounded = compiled({"type": "string", "format": "uri", "maxLength": 30})
    assert not bounded.grammar.ir.meta[CONSTANT_LEXEMES]
