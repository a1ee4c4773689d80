from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from service.auth.dependencies import CurrentCaller
from service.events import service
from service.events.schemas import StreamCursor

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

STREAM_DESCRIPTION = """\
A `text/event-stream` that replays the job's history, then follows it live until it ends.

Messages (each `data:` is JSON):
- `event: step` - a step, exactly as an item of `GET /v1/jobs/{job_id}/steps`;
- `event: job` - the job, on connect, whenever its status, steps_completed or config
  versions change, and once more (final) right before `end`;
- `event: <kind>` - a job event (`status`, `config_stored`, `config_applied`,
  `checkpoint`, ...), as an item of `GET /v1/jobs/{job_id}/events/history`;
- `event: end` - the job is terminal, its worker has let go of it (after a cancel the
  worker still records the step it was computing and its checkpoint) and everything was
  sent; the server then closes;
- `event: error` - the stream's API key was revoked (checked every few seconds): the server
  closes, and reconnecting with that key is a 401.

Every message's `id:` is a cursor `s<last step>.e<last event id>`; send the last one back
as the `Last-Event-ID` header (or `?after=`) to resume without duplicates. Comment lines
(`: keep-alive`) arrive every 15 s while nothing else does.
"""


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    description=STREAM_DESCRIPTION,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream_job_events(
    caller: CurrentCaller,
    job_id: str,
    after: Annotated[
        str | None, Query(description="Resume after this message id; overrides Last-Event-ID.")
    ] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    cursor = StreamCursor.parse(after if after is not None else last_event_id)
    body = await service.open_job_stream(caller, job_id, cursor)
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        # X-Accel-Buffering: nginx would otherwise hold messages back until its buffer fills.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
