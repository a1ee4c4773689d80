"""The report as one self-contained HTML page: its data embedded as JSON, drawn by the
dashboard's own scripts (service/ui/static/views.js) and style, all inline. Nothing is fetched:
saved to a file and opened offline (mailed, archived), it shows the same page.
"""

from __future__ import annotations

import html
from functools import cache
from pathlib import Path

from service.reports.schemas import JobReport

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE.parent / "ui" / "static"
# The page may run its own inline code and nothing else: no request leaves it, whatever an
# embedded completion says.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
)


@cache
def _assets() -> tuple[str, str]:
    """(style, script): the dashboard's, then the report's own."""
    style = (DASHBOARD / "style.css").read_text() + (HERE / "report.css").read_text()
    script = (DASHBOARD / "views.js").read_text() + (HERE / "report.js").read_text()
    # Inline, "</" would end the element early (our own files: checked, not escaped).
    assert "</style" not in style.lower() and "</script" not in script.lower()
    return style, script


def embedded_json(report: JobReport) -> str:
    """The report as JSON safe inside <script>: no '<', '>' or '&' survive, so a completion
    that says '</script><script>…' stays a string."""
    text = report.model_dump_json()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_report(report: JobReport) -> str:
    style, script = _assets()
    job = report.job
    title = html.escape(f"{job.name or job.id}: rft job report")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">
<title>{title}</title>
<style>
{style}
</style>
</head>
<body>
<main id="report"><noscript>This report draws itself with JavaScript: open it in a browser
with scripts on. Its data is in the page, as JSON, in the element with id "report-data".
</noscript></main>
<script type="application/json" id="report-data">{embedded_json(report)}</script>
<script>
{script}
</script>
</body>
</html>
"""
