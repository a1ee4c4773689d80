"""Interactive API docs (Swagger UI) served from our own origin, so /docs works offline.

FastAPI's default page loads Swagger UI from a CDN; behind a firewall, or on a machine
without internet, it stayed blank. The assets come from the swagger-ui-py package (Swagger UI
5, which renders the OpenAPI 3.1 document FastAPI writes) and are served from a fixed table,
as the dashboard's are: nothing else in that package can be reached. ReDoc is not offered:
no package ships it, and Swagger UI covers the same ground.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from service.errors import NotFound

ASSETS_PATH = "/docs/assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
# The files change only with the package's version.
CACHE_FOR_A_DAY = {"Cache-Control": "public, max-age=86400"}

router = APIRouter(include_in_schema=False)


def swagger_ui_dir() -> Path:
    """The package's static folder, found without importing it (its __init__ pulls in jinja2
    and PyYAML for web frameworks we do not use)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or spec.origin is None:
        raise RuntimeError("Swagger UI assets are missing: pip install 'rft-service[api]'")
    return Path(spec.origin).parent / "static"


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="rft API",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        # Swagger UI would otherwise send the document to validator.swagger.io.
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get(ASSETS_PATH + "/{asset}")
def swagger_ui_asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"no docs asset {asset!r}")
    return FileResponse(swagger_ui_dir() / asset, media_type=media_type, headers=CACHE_FOR_A_DAY)
