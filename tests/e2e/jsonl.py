#!/usr/bin/env python3
"""Read values out of a .jsonl file (metrics.jsonl, steps.jsonl) for the e2e tests.

    jsonl.py FILE LINE KEY [KEY...]

LINE is 1-based, -1 is the last line, "all" is every line. For each selected
line, prints the values of the KEYs separated by one space: numbers exactly as
the file writes them (0.500000 stays 0.500000), strings without quotes,
true/false/null as in JSON, arrays and objects as compact JSON; a missing key
prints as an empty field. Exits 1 with a message on stderr when the file cannot
be read, LINE does not exist or a selected line is not one JSON object.

It parses with Python's json module rather than matching text, so key order,
spacing and escaped quotes inside strings do not matter. It is not a general
query tool: no nested paths, no filtering.
"""
import json
import sys


def literal_text(value, plain):
    """value: parsed with numbers kept as their text; plain: parsed normally
    (for arrays and objects, whose strings and numbers must stay apart)."""
    if isinstance(plain, (list, dict)):
        return json.dumps(plain, separators=(",", ":"))
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return value  # a string, or a number's text


def parse(path, lineno, text):
    try:
        obj = json.loads(text, parse_int=str, parse_float=str)
        plain = json.loads(text)
    except ValueError as e:
        sys.exit(f"jsonl.py: {path}:{lineno}: not JSON: {e}")
    if not isinstance(obj, dict):
        sys.exit(f"jsonl.py: {path}:{lineno}: not a JSON object")
    return obj, plain


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: jsonl.py FILE LINE KEY [KEY...]")
    path, which, keys = argv[1], argv[2], argv[3:]
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        sys.exit(f"jsonl.py: {path}: {e.strerror}")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if which == "all":
        chosen = range(1, len(lines) + 1)
    else:
        try:
            n = int(which)
        except ValueError:
            sys.exit(f"jsonl.py: LINE must be a number, -1 or all, not {which!r}")
        if n == -1:
            n = len(lines)
        if n < 1 or n > len(lines):
            sys.exit(f"jsonl.py: {path}: no line {which} ({len(lines)} lines)")
        chosen = [n]
    for n in chosen:
        obj, plain = parse(path, n, lines[n - 1])
        print(" ".join(literal_text(obj[k], plain[k]) if k in obj else "" for k in keys))


if __name__ == "__main__":
    main(sys.argv)
