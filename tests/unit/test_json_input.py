"""Strict JSON reading (service.json_input) and what a validation error repeats
(service.errors.echoable_input): the rules that keep unstorable input out of Postgres."""

from __future__ import annotations

import json

import pytest

from service.errors import MAX_ECHOED_INPUT_CHARS, echoable_input
from service.json_input import (
    MAX_JSON_DEPTH,
    UnacceptableJson,
    check_json_value,
    check_storable_text,
    loads_strict,
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}', "body: NaN is not a JSON number"),
        ('{"a": [1, -Infinity]}', "body: -Infinity is not a JSON number"),
        ('{"a": 1e309}', "body: the number 1e309 is outside the range of a 64-bit float"),
        ('{"a": {"b\\u0000": 1}}', 'body: $.a has a key "b\\u0000" that holds a NUL'),
        ('{"a": ["x", "\\udfff"]}', "body: $.a[1] holds a lone UTF-16 surrogate (\\udfff)"),
        ('{"a b": "\\u0000"}', 'body: $."a b" holds a NUL character'),
        ("[" * 65 + "]" * 65, f"nested deeper than {MAX_JSON_DEPTH} levels"),
        ("[" * 50_000 + "]" * 50_000, f"nested deeper than {MAX_JSON_DEPTH} levels"),
        ("9" * 4301, "an integer has more than 4300 digits"),
    ],
)
def test_unstorable_json_is_refused_naming_the_place(text: str, message: str) -> None:
    with pytest.raises(UnacceptableJson) as refused:
        loads_strict(text, where="body")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "\\\\u0000"}',  # an escaped backslash, then the text u0000: no NUL
        '"\\ud83d\\ude00"',  # a surrogate pair is one character
        "[" * 64 + "]" * 64,
        "9" * 4300,
        '{"a": 1.5e308, "b": "é"}',
    ],
)
def test_storable_json_is_read_as_json_loads_reads_it(text: str) -> None:
    assert loads_strict(text) == json.loads(text)


def test_bytes_in_any_json_encoding_are_checked() -> None:
    assert loads_strict('{"a": 1}'.encode("utf-16")) == {"a": 1}
    with pytest.raises(UnacceptableJson, match="NUL"):
        loads_strict('{"a": "\\u0000"}'.encode("utf-16"))
    with pytest.raises(UnacceptableJson, match="not UTF-8"):
        loads_strict(b'{"a": "\xff"}')


def test_syntax_errors_stay_json_decode_errors() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_strict('{"a": }')


def test_values_built_in_python_are_checked_too() -> None:
    check_json_value({"rows": [{"x": 1.0, "y": "ok"}]})
    with pytest.raises(UnacceptableJson, match=r"\$\.rows\[0\]\.x is nan"):
        check_json_value({"rows": [{"x": float("nan")}]})
    with pytest.raises(UnacceptableJson, match="the name holds a NUL"):
        check_storable_text("a\x00", what="the name")


def test_validation_errors_repeat_short_inputs_and_cut_long_ones() -> None:
    assert echoable_input("short") == "short"
    assert echoable_input({"a": [1, 2]}) == {"a": [1, 2]}
    long = "x" * 1_000_000
    cut = echoable_input(long)
    assert cut == "x" * MAX_ECHOED_INPUT_CHARS + "... (1000000 characters, not repeated)"
    assert echoable_input(float("nan")) == "nan"  # JSON cannot carry NaN
    assert echoable_input("a\ud800") == "a?"  # nor a lone surrogate
