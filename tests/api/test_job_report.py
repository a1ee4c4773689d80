"""GET /v1/jobs/{id}/report.html: one self-contained page of a recorded run (no training:
tests/recording/recorded_run.py records it as the worker would). What the page draws is
checked in a browser (tests/ui/test_job_report.py); here, what it holds and who may read it."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.recording.recorded_run import HOSTILE, STEPS, RecordedRun, recorded_run


@pytest.fixture
def run(stack: LocalStack, api_key: str) -> RecordedRun:
    return recorded_run(api_key)


DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>')


def embedded(page: str) -> dict[str, Any]:
    match = DATA.search(page)
    assert match is not None
    data: dict[str, Any] = json.loads(match[1])
    return data


def test_the_report_holds_the_whole_run_in_one_page(client: httpx.Client, run: RecordedRun) -> None:
    response = client.get(f"/v1/jobs/{run.job_id}/report.html")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    # Self-contained: nothing to fetch, and a policy that forbids fetching anything.
    data = DATA.search(page)
    assert data is not None
    code = page.replace(data[1], "")
    assert not re.search(r"<(link|img|iframe|object|embed)\b|\ssrc=|url\(|@import", code)
    assert set(re.findall(r"https?://[^\s\"']*", code)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page

    report = embedded(page)
    assert report["job"]["id"] == run.job_id
    assert [s["step"] for s in report["steps"]] == list(range(1, STEPS + 1))
    assert [p["step"] for p in report["completion_lengths"]] == list(range(1, STEPS + 1))
    assert [s["kl"] for s in report["steps"]][-1] == pytest.approx(0.06)
    assert [e["step"] for e in report["evaluations"]] == [3, 6]
    versions = report["config_versions"]
    assert [(v["version"], v["applied_at_step"]) for v in versions] == [(1, 1), (2, 4)]
    assert "count('yes')" in versions[1]["reward_functions"]["says_yes"]["source"]
    assert [(e["kind"], e["step"]) for e in report["events"]] == [
        ("config_applied", 4),
        ("guard_tripped", 6),
    ]
    trips = [w for w in report["job"]["warnings"] if w.get("guard")]
    assert [(t["kind"], t["step"]) for t in trips] == [("repetition", 6)]
    # Default: the first and the last step, the highest and the lowest rewards of each.
    assert [c["step"] for c in report["completions"]] == [1, STEPS]
    first = report["completions"][0]
    assert [c["total"] for c in first["best"]] == sorted(
        (c["total"] for c in first["best"]), reverse=True
    )
    assert first["best"][0]["total"] >= first["worst"][0]["total"]
    assert report["lineage"]["parent"] == {
        "id": run.parent_id,
        "name": "stage 1",
        "status": "succeeded",
        "checkpoint_step": 3,
    }
    assert [c["id"] for c in report["lineage"]["children"]] == [run.child_id]
    assert [e["id"] for e in report["exports"]] == [run.export_id]


def test_user_text_cannot_break_out_of_the_page(client: httpx.Client, run: RecordedRun) -> None:
    page = client.get(f"/v1/jobs/{run.job_id}/report.html").text
    # The completion and the job's name are data: no markup of theirs reaches the page.
    assert HOSTILE not in page and "<b>bold</b>" not in page
    assert "window.reportPwned" in page  # there, escaped inside the JSON
    assert page.count("</script>") == 2  # the data's and the code's, nothing else
    assert "<title>stage 2 &lt;b&gt;bold&lt;/b&gt;: rft job report</title>" in page
    hostile = [
        c["completion"]
        for chosen in embedded(page)["completions"]
        for c in chosen["best"] + chosen["worst"]
        if "script" in c["completion"]
    ]
    assert hostile == [HOSTILE]  # the text itself, unchanged once parsed


def test_steps_choose_the_completions_shown(client: httpx.Client, run: RecordedRun) -> None:
    response = client.get(f"/v1/jobs/{run.job_id}/report.html", params={"steps": [4, 2]})
    assert response.status_code == 200, response.text
    assert [c["step"] for c in embedded(response.text)["completions"]] == [2, 4]

    missing = client.get(f"/v1/jobs/{run.job_id}/report.html", params={"steps": [2, 99]})
    assert missing.status_code == 400
    assert "no step 99" in missing.json()["detail"], missing.text
    too_many = client.get(
        f"/v1/jobs/{run.job_id}/report.html", params={"steps": list(range(1, 12))}
    )
    assert too_many.status_code == 400 and "at most 10" in too_many.json()["detail"]
    not_a_step = client.get(f"/v1/jobs/{run.job_id}/report.html", params={"steps": "x"})
    assert not_a_step.status_code == 422


def test_another_tenants_job_is_not_found(
    client: httpx.Client, other_client: httpx.Client, run: RecordedRun
) -> None:
    foreign = other_client.get(f"/v1/jobs/{run.job_id}/report.html")
    assert foreign.status_code == 404
    assert foreign.json()["detail"] == f"job {run.job_id!r} not found"
