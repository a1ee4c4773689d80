"""Dataset uploads from every kind of input, against the real API."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import rft

ROWS = [{"prompt": f"Write about {topic}:", "topic": topic} for topic in ["cats", "rain", "tea"]]


def test_upload_from_a_path(rft_client: rft.Client, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in ROWS))
    dataset = rft_client.datasets.upload(path)
    assert dataset.row_count == 3 and dataset.file_format == "jsonl"
    assert dataset.name == "rows.jsonl" or dataset.name  # the server may name it by the file
    assert set(dataset.columns) >= {"prompt", "topic"}


def test_upload_csv_by_path_string(rft_client: rft.Client, tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    pd.DataFrame(ROWS).to_csv(path, index=False)
    dataset = rft_client.datasets.upload(str(path), name="from csv")
    assert (dataset.name, dataset.file_format, dataset.row_count) == ("from csv", "csv", 3)


def test_upload_a_list_of_dicts_and_read_the_preview(rft_client: rft.Client) -> None:
    dataset = rft_client.datasets.upload(ROWS, name="in memory")
    assert dataset.name == "in memory" and dataset.row_count == 3
    detail = rft_client.datasets.get(dataset.id)
    assert isinstance(detail, rft.DatasetDetail)
    assert detail.preview[0]["topic"] == "cats"


def test_upload_a_dataframe(rft_client: rft.Client) -> None:
    frame = pd.DataFrame(ROWS).assign(score=[1.5, float("nan"), 2.0])
    dataset = rft_client.datasets.upload(frame, name="frame")
    assert dataset.row_count == 3
    assert "score" in dataset.columns


def test_upload_a_hugging_face_dataset(rft_client: rft.Client) -> None:
    import datasets

    dataset = rft_client.datasets.upload(datasets.Dataset.from_list(ROWS), name="hf")
    assert dataset.row_count == 3


def test_list_iterates_every_page(rft_client: rft.Client) -> None:
    uploaded = {rft_client.datasets.upload(ROWS, name=f"d{i}").id for i in range(3)}
    listed = [dataset.id for dataset in rft_client.datasets.list(limit=1)]
    assert set(listed) == uploaded and len(listed) == 3
    pages = list(rft_client.datasets.list(limit=2).pages())
    assert [len(page.data) for page in pages] == [2, 1]


def test_bad_inputs_are_refused_before_sending(rft_client: rft.Client) -> None:
    with pytest.raises(rft.RFTError, match="every row must be a dict"):
        rft_client.datasets.upload([{"prompt": "x"}, "not a row"])  # type: ignore[list-item]
    with pytest.raises(rft.RFTError, match="no rows"):
        rft_client.datasets.upload([])


def test_a_file_without_prompts_is_a_400_with_the_server_detail(rft_client: rft.Client) -> None:
    with pytest.raises(rft.BadRequestError) as caught:
        rft_client.datasets.upload([{"question": "no prompt column"}])
    assert caught.value.status_code == 400
    assert caught.value.error == "InvalidDataset"
    assert "prompt" in caught.value.detail
