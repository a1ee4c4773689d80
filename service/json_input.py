"""JSON from clients, held to what we can store and send back.

Python's json module accepts more than JSON: NaN and Infinity, numbers that overflow to
infinity (1e400), lone UTF-16 surrogates ("\\ud800") and NUL characters. None of these fits a
Postgres jsonb or text column, and a surrogate cannot even be encoded as UTF-8 for the reply,
so each used to surface as a 500 somewhere deep in a request. Everything a client sends as
JSON (request bodies and dataset files) is read here first, and refused with a message that
says what and where.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

# Deeper than any request body or dataset row needs, and far below the depth at which
# decoding, validation or Postgres would run out of stack.
MAX_JSON_DEPTH = 64
# Python refuses to convert longer digit strings to int (a defence against quadratic-time
# conversion); json.loads then raises a bare ValueError.
MAX_INTEGER_DIGITS = sys.get_int_max_str_digits() or 4300

_UNSTORABLE_CHARACTER = re.compile("[\x00\ud800-\udfff]")


class UnacceptableJson(ValueError):
    """JSON that parses but that we cannot store or echo; the message names the place."""


def _refuse_constant(name: str) -> Any:
    raise UnacceptableJson(f"{name} is not a JSON number: send a finite number or null")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnacceptableJson(f"the number {text[:40]} is outside the range of a 64-bit float")
    return value


# Only \u escapes put NUL or a lone surrogate into a str decoded from UTF-8 JSON (raw control
# characters are a syntax error), so text without them needs no walk for characters.
_UNSTORABLE_ESCAPE = re.compile(r"\\u(0000|[dD][89abcdefABCDEF])")


def loads_strict(data: str | bytes, *, where: str = "the JSON") -> Any:
    """``json.loads`` that raises UnacceptableJson for NaN and Infinity, numbers that overflow
    a float, integers of more than MAX_INTEGER_DIGITS digits, and what ``check_json_value``
    refuses (NUL, lone surrogates, nesting deeper than MAX_JSON_DEPTH).

    Syntax errors stay json.JSONDecodeError, so callers report them as they always have.
    """
    try:
        text = data.decode(json.detect_encoding(data)) if isinstance(data, bytes) else data
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except UnacceptableJson as exc:
        raise UnacceptableJson(f"{where}: {exc}") from None
    except RecursionError:
        raise UnacceptableJson(
            f"{where}: nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
        ) from None
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise UnacceptableJson(f"{where}: not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:  # int() refusing a digit string past the limit
        if "digits" in str(exc):
            raise UnacceptableJson(
                f"{where}: an integer has more than {MAX_INTEGER_DIGITS} digits"
            ) from None
        raise
    nesting_possible = text.count("[") + text.count("{") > MAX_JSON_DEPTH
    if nesting_possible or _UNSTORABLE_ESCAPE.search(text):
        check_json_value(value, where=where)
    return value


class _Refused(Exception):
    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.path: list[str | int] = []


def check_json_value(value: Any, *, where: str = "the JSON") -> None:
    """Raise UnacceptableJson for non-finite floats, NUL characters and lone surrogates in
    strings or keys, and nesting deeper than MAX_JSON_DEPTH. The message gives the path."""
    try:
        _check(value, 0)
    except _Refused as refused:
        raise UnacceptableJson(f"{where}: {_path(refused.path)} {refused.problem}") from None


def check_storable_text(text: str, *, what: str) -> None:
    """Raise UnacceptableJson when ``text`` holds NUL or a lone surrogate."""
    found = _UNSTORABLE_CHARACTER.search(text)
    if found is not None:
        raise UnacceptableJson(f"{what} {_character_problem(found.group())}")


def _check(item: Any, depth: int) -> None:
    # Recursion is safe: it stops at MAX_JSON_DEPTH.
    if isinstance(item, str):
        found = _UNSTORABLE_CHARACTER.search(item)
        if found is not None:
            raise _Refused(_character_problem(found.group()))
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise _Refused(f"is {item}, outside the range of a 64-bit float")
    elif isinstance(item, dict | list):
        if depth >= MAX_JSON_DEPTH:
            raise _Refused(f"is nested deeper than {MAX_JSON_DEPTH} levels")
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            if isinstance(key, str):
                found = _UNSTORABLE_CHARACTER.search(key)
                if found is not None:
                    shown = json.dumps(key[:40])
                    raise _Refused(f"has a key {shown} that {_character_problem(found.group())}")
            try:
                _check(child, depth + 1)
            except _Refused as refused:
                refused.path.append(key)
                raise


def _character_problem(character: str) -> str:
    if character == "\x00":
        return "holds a NUL character (\\u0000)"
    return f"holds a lone UTF-16 surrogate (\\u{ord(character):04x}), which is not a character"


def _path(reversed_keys: list[str | int]) -> str:
    text = "$"
    for key in reversed(reversed_keys):
        text += f"[{key}]" if isinstance(key, int) else f".{_printable(key)}"
    return text if len(text) <= 120 else text[:120] + "..."


def _printable(key: str) -> str:
    shown = key if len(key) <= 40 else key[:40] + "..."
    return shown if shown.isidentifier() else json.dumps(shown)
