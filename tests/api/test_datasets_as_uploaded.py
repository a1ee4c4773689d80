"""Uploads over HTTP: a CSV that cannot be read as written is a 400 naming the line; Parquet
binary and map columns reach the rows with their data."""

from __future__ import annotations

import base64
import io

import httpx
import pyarrow as pa
import pyarrow.parquet as pq


def test_csv_with_a_quote_that_never_closes_is_400_naming_the_line(client: httpx.Client) -> None:
    content = b'prompt,answer\nfirst,1\nsecond,2\n"third,3\nfourth,4\n'
    response = client.post("/v1/datasets", files={"file": ("rows.csv", content)})
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == (
        "CSV line 4: a quoted field opened on this line is never closed"
    )


def test_parquet_binary_and_map_columns_keep_their_data(client: httpx.Client) -> None:
    blob = b"\x89PNG\r\n\x1a\n\x00\xff"
    table = pa.table(
        {
            "prompt": ["describe the image"],
            "image": pa.array([blob], pa.binary()),
            "labels": pa.array(
                [[("colour", "red"), ("size", "L")]], pa.map_(pa.string(), pa.string())
            ),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    uploaded = client.post("/v1/datasets", files={"file": ("rows.parquet", buffer.getvalue())})
    assert uploaded.status_code == 201, uploaded.text
    row = client.get(f"/v1/datasets/{uploaded.json()['id']}").json()["preview"][0]
    assert base64.b64decode(row["image"]) == blob
    assert row["labels"] == {"colour": "red", "size": "L"}
