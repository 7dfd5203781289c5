import string
import textwrap

VOWELS = set("aeiouAEIOU")
TEMPLATE = """Dear {name},

Your order #{order:05d} has shipped.
"""


def snake_case(name):
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i > 0 and name[i - 1] != "_":
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def caesar(text, shift=3):
    lower = string.ascii_lowercase
    table = str.maketrans(lower, lower[shift:] + lower[:shift])
    return text.translate(table)


def count_vowels(text):
    return sum(1 for c in text if c in VOWELS)


def wrap(text, width=40):
    return "\n".join(textwrap.wrap(text, width=width))


def is_palindrome(s):
    cleaned = [c.lower() for c in s if c.isalnum()]
    return cleaned == cleaned[::-1]


print(snake_case("HelloWorldAgain"), caesar("abc xyz"))
print(TEMPLATE.format(name="Ada", order=42))
print(r"raw \d+ string", b"bytes", rb"\x00", 'single \'quoted\'', "tab\there")
