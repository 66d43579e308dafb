"""The OpenAPI page works offline: Swagger UI's scripts and styles come from the API itself
(the ``fastapi-offline`` package's Swagger UI 5), never from a CDN."""

from __future__ import annotations

import re

from tests.unit.api.conftest import Api


def test_the_docs_page_loads_swagger_ui_from_the_api_itself(api: Api):
    page = api.client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(url.startswith("/docs/assets/") for url in assets), assets
    assert "cdn" not in page.text.lower()
    for url in assets:
        served = api.client.get(url)
        assert served.status_code == 200 and len(served.content) > 0, url
    assert "SwaggerUIBundle" in api.client.get("/docs/assets/swagger-ui-bundle.js").text
    assert api.client.get("/openapi.json").json()["info"]["title"] == "cronstream"


def test_redoc_is_not_served_since_it_would_need_a_cdn(api: Api):
    assert api.client.get("/redoc").status_code == 404
