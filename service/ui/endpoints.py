"""Serves the dashboard's static files. A fixed table, not a directory mount: nothing
but these files can be reached, and the app needs no mount outside its routers."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from service.errors import NotFound

STATIC_DIR = Path(__file__).resolve().parent / "static"
ASSETS = {
    "views.js": "text/javascript; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# The files change with each release; revalidating is cheap and avoids a stale app.js.
NO_CACHE = {"Cache-Control": "no-cache"}

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("")
def redirect_to_dashboard() -> RedirectResponse:
    # A trailing slash keeps the page's relative asset URLs under /ui/.
    return RedirectResponse("/ui/")


@router.get("/")
def dashboard() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=NO_CACHE)


@router.get("/{asset}")
def dashboard_asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"no dashboard file {asset!r}")
    return FileResponse(STATIC_DIR / asset, media_type=media_type, headers=NO_CACHE)
