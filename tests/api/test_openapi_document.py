"""The API documents itself without the internet: /docs uses only assets we serve, and the
OpenAPI document lists each operation's errors and the body rules it enforces."""

from __future__ import annotations

import re

import httpx
import pytest

from service.stack import LocalStack

CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


def test_docs_load_only_assets_from_our_own_origin(stack: LocalStack) -> None:
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        page = http.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        references = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(
            r"url: '([^']+)'", page.text
        )
        assert len(references) >= 4  # the script, the stylesheet, the icon, the document
        for reference in references:
            assert reference.startswith("/") and not reference.startswith("//"), reference
            asset = http.get(reference)
            assert asset.status_code == 200, reference
            suffix = reference[reference.rfind(".") :]
            if suffix in CONTENT_TYPES:
                assert asset.headers["content-type"].startswith(CONTENT_TYPES[suffix])
        assert "SwaggerUIBundle" in http.get("/docs/assets/swagger-ui-bundle.js").text
        # Swagger UI would send the document to an outside validator.
        assert '"validatorUrl": null' in page.text
        assert http.get("/docs/assets/swagger-ui-bundle.js.map").status_code == 404
        assert http.get("/docs/assets/..%2F..%2Fsettings.py").status_code == 404


def test_redoc_is_not_served(stack: LocalStack) -> None:
    # No package ships ReDoc's assets; rather than a page that needs a CDN, none.
    assert httpx.get(f"{stack.base_url}/redoc", timeout=30).status_code == 404


@pytest.fixture(scope="module")
def document(stack: LocalStack) -> dict:
    return httpx.get(f"{stack.base_url}/openapi.json", timeout=30).json()


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("post", "/v1/jobs", {"400", "401", "404", "413", "422", "503"}),
        ("get", "/v1/jobs", {"400", "401", "422", "503"}),
        ("get", "/v1/jobs/{job_id}", {"400", "401", "404", "422", "503"}),
        ("post", "/v1/jobs/estimate", {"400", "401", "404", "413", "422", "503"}),
        ("get", "/v1/usage", {"400", "401", "422", "503"}),
        ("post", "/v1/jobs/{job_id}/resume", {"400", "401", "404", "409", "422", "503"}),
        ("get", "/v1/jobs/{job_id}/report.html", {"400", "401", "404", "422", "503"}),
        ("post", "/v1/jobs/{job_id}/exports", {"400", "401", "404", "409", "422", "503"}),
        ("get", "/v1/jobs/{job_id}/merged.tar.gz", {"400", "401", "404", "409", "422", "503"}),
        (
            "delete",
            "/v1/jobs/{job_id}/exports/{export_id}",
            {"400", "401", "404", "409", "422", "503"},
        ),
        ("post", "/v1/datasets", {"400", "401", "413", "422", "503"}),
        ("post", "/v1/reward-functions/test", {"400", "401", "404", "413", "422", "503"}),
        ("post", "/v1/webhooks", {"400", "401", "413", "422", "503"}),
        ("delete", "/v1/webhooks/{webhook_id}", {"400", "401", "404", "422", "503"}),
        ("get", "/v1/webhooks/{webhook_id}/deliveries", {"400", "401", "404", "422", "503"}),
    ],
)
def test_each_operation_lists_its_errors(
    document: dict, method: str, path: str, statuses: set[str]
) -> None:
    responses = document["paths"][path][method]["responses"]
    assert statuses <= set(responses)
    for status in statuses - {"422"}:
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}
        assert responses[status]["description"]
    assert set(document["components"]["schemas"]["ErrorBody"]["required"]) == {"error", "detail"}


def test_the_document_states_the_body_rules(document: dict) -> None:
    schemas = document["components"]["schemas"]
    # At least one reward function, in reward_functions or from reward_module.
    for name in ("JobCreate", "JobConfigUpdate", "RewardFunctionTest"):
        assert {"required": ["reward_module"]} in schemas[name]["anyOf"]
        assert {
            "required": ["reward_functions"],
            "properties": {"reward_functions": {"minProperties": 1}},
        } in schemas[name]["anyOf"]
    update = schemas["JobConfigUpdate"]["properties"]["reward_functions"]
    assert update["maxProperties"] == 16
    assert update["propertyNames"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]{0,63}$"
    seed = schemas["Hyperparameters"]["properties"]["seed"]
    assert seed["maximum"] == 2**32 - 1
    steps = document["paths"]["/v1/jobs/{job_id}/steps"]["get"]["parameters"]
    after_step = next(p for p in steps if p["name"] == "after_step")
    assert after_step["schema"]["maximum"] == 2**31 - 1
