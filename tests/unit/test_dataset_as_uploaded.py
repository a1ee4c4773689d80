"""Uploaded rows keep their data, or the upload is refused naming what cannot be kept."""

from __future__ import annotations

import base64
import io
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.datasets.parsing import parse_dataset
from service.errors import InvalidDataset


def parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def test_csv_quote_that_never_closes_is_refused_naming_its_line() -> None:
    content = b'prompt,answer\nfirst,1\n"second,2\nthird,3\nfourth,4\n'
    with pytest.raises(InvalidDataset, match=r"CSV line 3: a quoted field .* never closed"):
        parse_dataset(content, "csv", max_rows=10)


def test_csv_text_after_a_closing_quote_is_refused_naming_its_line() -> None:
    content = b'prompt,answer\nfirst,1\n"multi\nline" x,2\n'
    with pytest.raises(InvalidDataset, match="CSV line 4"):
        parse_dataset(content, "csv", max_rows=10)


def test_csv_quoted_newlines_short_lines_and_blank_lines_still_read() -> None:
    content = b'prompt,answer\n"two\nlines",1\n\nshort\n'
    parsed = parse_dataset(content, "csv", max_rows=10)
    assert parsed.rows == [
        {"prompt": "two\nlines", "answer": "1"},
        {"prompt": "short", "answer": None},
    ]


def test_parquet_binary_becomes_base64_and_keeps_every_byte() -> None:
    blob = bytes(range(256))
    parsed = parse_dataset(
        parquet(pa.table({"prompt": ["p"], "image": pa.array([blob], pa.binary())})),
        "parquet",
        max_rows=10,
    )
    assert base64.b64decode(parsed.rows[0]["image"]) == blob


def test_parquet_maps_keep_their_entries() -> None:
    table = pa.table(
        {
            "prompt": ["p", "q"],
            "labels": pa.array(
                [[("colour", 1), ("size", 2)], []], pa.map_(pa.string(), pa.int64())
            ),
            "by_id": pa.array(
                [[(7, "seven"), (7, "again")], None], pa.map_(pa.int32(), pa.string())
            ),
            "nested": pa.array(
                [[{"m": [("k", b"\x00\xff")]}], []],
                pa.list_(pa.struct([("m", pa.map_(pa.string(), pa.binary()))])),
            ),
        }
    )
    rows = parse_dataset(parquet(table), "parquet", max_rows=10).rows
    assert rows[0]["labels"] == {"colour": 1, "size": 2} and rows[1]["labels"] == {}
    # Non-string keys cannot be JSON object keys: pairs keep their types (and repeats).
    assert rows[0]["by_id"] == [[7, "seven"], [7, "again"]] and rows[1]["by_id"] is None
    assert rows[0]["nested"] == [{"m": {"k": base64.b64encode(b"\x00\xff").decode()}}]


def test_parquet_map_that_repeats_a_string_key_is_refused_naming_the_column() -> None:
    table = pa.table(
        {"prompt": ["p"], "tags": pa.array([[("a", 1), ("a", 2)]], pa.map_(pa.string(), pa.int8()))}
    )
    with pytest.raises(InvalidDataset, match="column 'tags': a map repeats the key 'a'"):
        parse_dataset(parquet(table), "parquet", max_rows=10)


def test_parquet_binary_prompt_is_refused() -> None:
    table = pa.table({"prompt": pa.array([b"hello"], pa.binary())})
    with pytest.raises(InvalidDataset, match="'prompt' holds binary data"):
        parse_dataset(parquet(table), "parquet", max_rows=10)


def test_parquet_durations_are_seconds() -> None:
    table = pa.table({"prompt": ["p"], "took": pa.array([timedelta(seconds=90)], pa.duration("s"))})
    assert parse_dataset(parquet(table), "parquet", max_rows=10).rows[0]["took"] == 90.0
