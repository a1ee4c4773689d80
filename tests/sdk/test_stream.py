"""``jobs.stream``: the SSE decoder, then following real jobs, through cut connections too."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

import rft
from rft.sse import SSEDecoder
from service.stack import LocalStack
from tests.sdk.fault_proxy import CutStream, FaultPlan, fault_proxy
from tests.sdk.job_inputs import QUICK_HYPERPARAMETERS, SHOUT_SOURCE

TRAIN_STEPS = 5
CURSOR = re.compile(r"^s(\d+)\.e(\d+)$")


# --- the decoder, fed byte by byte and in odd chunks ----------------------------------------


def decode(*chunks: bytes) -> list[tuple[str, str, str | None]]:
    decoder = SSEDecoder()
    return [(m.event, m.data, m.id) for chunk in chunks for m in decoder.feed(chunk)]


def test_decoder_joins_data_lines_skips_comments_and_keeps_the_id() -> None:
    body = (
        b": keep-alive\n\n"
        b'event: step\nid: s1.e2\ndata: {"a":\ndata:  1}\n\n'
        b"data\n\n"  # a field without a colon: empty data, default event type
        b"id: s1.e3\n\n"  # an id-only block: no message, but the cursor moves
        b"event: end\ndata: {}\n\n"
    )
    expected = [
        ("step", '{"a":\n 1}', "s1.e2"),
        ("message", "", "s1.e2"),
        ("end", "{}", "s1.e3"),
    ]
    assert decode(body) == expected
    assert decode(*(body[i : i + 1] for i in range(len(body)))) == expected


def test_decoder_handles_every_line_ending_split_anywhere() -> None:
    body = "\ufeffevent: a\r\ndata: é\r\rdata: x\ndata: y\r\n\r\n".encode()
    expected = [("a", "é", None), ("message", "x\ny", None)]
    for cut in range(len(body) + 1):
        assert decode(body[:cut], body[cut:]) == expected, cut


def test_decoder_drops_a_message_cut_off_by_the_end_of_the_stream() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: s1.e1\ndata: 1\n\nid: s2.e1\ndata: 2\n") != []
    assert decoder.last_event_id == "s1.e1"  # the unfinished message moved nothing


# --- real jobs ------------------------------------------------------------------------------


@pytest.fixture
def job(rft_client: rft.Client, dataset: rft.Dataset) -> Iterator[rft.Job]:
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={"shout": SHOUT_SOURCE},
        hyperparameters={**QUICK_HYPERPARAMETERS, "train_steps": TRAIN_STEPS},
    )
    yield job
    if not rft_client.jobs.get(job.id).status.is_terminal:
        rft_client.jobs.cancel(job.id)


def check_streamed(
    client: rft.Client, job_id: str, items: list[rft.Step | rft.JobEvent | rft.Job]
) -> None:
    """Every step and event exactly once, in order, equal to what the history endpoints say."""
    steps = [item for item in items if isinstance(item, rft.Step)]
    assert [step.step for step in steps] == list(range(1, TRAIN_STEPS + 1))
    assert steps == client.jobs.steps(job_id)
    events = [item for item in items if isinstance(item, rft.JobEvent)]
    assert events == list(client.jobs.events(job_id))
    statuses = [event.data["status"] for event in events if event.kind == "status"]
    assert statuses[0] == "queued" and "running" in statuses and statuses[-1] == "succeeded"


def test_stream_follows_a_job_live_to_its_end(rft_client: rft.Client, job: rft.Job) -> None:
    items = list(rft_client.jobs.stream(job.id, include_job_snapshots=True))
    check_streamed(rft_client, job.id, items)
    snapshots = [item for item in items if isinstance(item, rft.Job)]
    assert snapshots[0].id == job.id
    assert snapshots[-1].status == rft.JobStatus.SUCCEEDED
    assert snapshots[-1].steps_completed == TRAIN_STEPS
    # Without the flag: the same steps and events, no snapshots; an ended job replays at once.
    replayed = list(rft_client.jobs.stream(job.id))
    assert replayed == [item for item in items if not isinstance(item, rft.Job)]


def stream_requests(plan: FaultPlan) -> list[str | None]:
    """The Last-Event-ID each (re)connection sent."""
    streams = [seen for seen in plan.seen if seen.path.endswith("/events")]
    return [seen.headers.get("Last-Event-ID") for seen in streams]


def check_resumed(plan: FaultPlan) -> None:
    cursors = stream_requests(plan)
    assert len(cursors) == 5 and cursors[0] is None  # 4 failures, each followed by a resume
    positions = []
    for cursor in cursors[1:]:
        match = CURSOR.match(cursor or "")
        assert match, cursor
        positions.append((int(match[1]), int(match[2])))
    assert positions == sorted(positions)
    assert [step for step, _ in positions] == [2, 2, 4, 4], positions


# Connections cut a few bytes after the 2nd step they carried (into the next message, which
# must then be read again), or refused: between two cuts the stream makes progress, so
# max_retries=2 is never exceeded. Whether steps are replayed or live, resumption happens at
# steps 2 and 4 of 5.
FAULTS = (CutStream(2, 60, event="step"), "503", CutStream(2, 30, event="step"), "drop")


def test_stream_resumes_after_dropped_connections(
    stack: LocalStack, api_key: str, rft_client: rft.Client, job: rft.Job
) -> None:
    with (
        fault_proxy(stack.base_url) as (proxy_url, plan),
        rft.Client(api_key=api_key, base_url=proxy_url, max_retries=2) as client,
    ):
        plan.fail_next(*FAULTS)
        items = list(client.jobs.stream(job.id))
    check_streamed(rft_client, job.id, items)
    check_resumed(plan)


def test_async_stream_resumes_after_dropped_connections(
    stack: LocalStack, api_key: str, rft_client: rft.Client, job: rft.Job
) -> None:
    async def follow(proxy_url: str) -> list[rft.Step | rft.JobEvent | rft.Job]:
        async with rft.AsyncClient(api_key=api_key, base_url=proxy_url, max_retries=2) as client:
            return [item async for item in client.jobs.stream(job.id, include_job_snapshots=True)]

    with fault_proxy(stack.base_url) as (proxy_url, plan):
        plan.fail_next(*FAULTS)
        items = asyncio.run(follow(proxy_url))
    check_streamed(rft_client, job.id, items)
    check_resumed(plan)
    last = [item for item in items if isinstance(item, rft.Job)][-1]
    assert last.status == rft.JobStatus.SUCCEEDED


def test_stream_gives_up_after_max_retries_and_never_retries_a_4xx(
    stack: LocalStack, api_key: str, idle_job: rft.Job
) -> None:
    with (
        fault_proxy(stack.base_url) as (proxy_url, plan),
        rft.Client(api_key=api_key, base_url=proxy_url, max_retries=2) as client,
    ):
        plan.fail_next("503", "503", "503")
        with pytest.raises(rft.InternalServerError):
            list(client.jobs.stream(idle_job.id))
        assert len(stream_requests(plan)) == 3
        plan.fail_next("drop", "drop", "drop")
        with pytest.raises(rft.APIConnectionError):
            list(client.jobs.stream(idle_job.id))
        assert len(stream_requests(plan)) == 6
        with pytest.raises(rft.NotFoundError):
            list(client.jobs.stream("job_missing"))
        assert len(stream_requests(plan)) == 7
        # Within the budget, a cancelled job's stream still arrives whole.
        plan.fail_next("503", "drop")
        items = list(client.jobs.stream(idle_job.id))
        statuses = [
            e.data["status"] for e in items if isinstance(e, rft.JobEvent) and e.kind == "status"
        ]
        assert statuses[-1] == "cancelled"


def test_poll_interval_is_deprecated_and_ignored(rft_client: rft.Client, idle_job: rft.Job) -> None:
    with pytest.warns(DeprecationWarning, match="poll_interval"):
        items = rft_client.jobs.stream(idle_job.id, poll_interval=0.1)
    events = [item for item in items if isinstance(item, rft.JobEvent)]
    assert events == list(rft_client.jobs.events(idle_job.id))
