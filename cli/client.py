"""The HTTP client the CLI's tenant-facing commands share, and how its failures become exit
codes (``cli.failures``): the API's refusal names the field (1), a refused key is denied (4), an
API that cannot be reached is unreachable (3)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from cli.failures import API_NEXT_STEP, DENIED, USAGE, CliError, http_failure


def describe(body: Any) -> str:
    """The API's error body in one line: ``field: problem`` for each problem it names."""
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            loc = [str(x) for x in item.get("loc", []) if x not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc) or 'request'}: {item.get('msg')}")
        return "; ".join(parts)
    return str(detail)


class Client:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise http_failure("the API", str(self.http.base_url).rstrip("/"), exc,
                               API_NEXT_STEP) from exc
        if response.status_code >= 400:
            try:
                message = describe(response.json())
            except ValueError:
                message = response.text[:200]
            if response.status_code == 401:  # the key, not the request: a setting to fix
                raise CliError(f"the API at {str(self.http.base_url).rstrip('/')} refused the "
                               f"API key (HTTP 401: {message}; check --api-key or "
                               f"CRONSTREAM_API_KEY)", DENIED)
            raise CliError(f"{method} {path}: HTTP {response.status_code}: {message}")
        return response.json() if response.content else None

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a cursor-paged list."""
        cursor = None
        while True:
            page = self.call("GET", path, params={**params, **({"cursor": cursor} if cursor else {})})
            yield from page["items"]
            cursor = page.get("next_cursor")
            if cursor is None:
                return


def client(api_url: str | None, api_key: str | None) -> Client:
    from streams.runtime import settings

    conf = settings.load()
    key = api_key or conf.api_key
    if not key:
        raise CliError("no API key: pass --api-key or set CRONSTREAM_API_KEY "
                       "(cronstream tenant create NAME prints one)", USAGE)
    return Client(api_url or conf.api_url, key)


def load_documents(path: str) -> list[dict[str, Any]]:
    """A YAML or JSON file (``-`` for stdin) holding one object or a list of them."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CliError(f"--file {path}: {exc.strerror}", USAGE) from exc
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(f"--file {path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}: "
                       f"{str(exc).splitlines()[0]}", USAGE) from exc
    docs = data if isinstance(data, list) else [data]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise CliError(f"--file {path}: document {i + 1} is not a mapping", USAGE)
    return docs


def emit(value: Any, as_json: bool, human: str | None = None) -> None:
    """JSON for scripts (``--json``), otherwise the human line (or indented JSON)."""
    if as_json or human is None:
        print(json.dumps(value, indent=None if as_json else 2, default=str))
    else:
        print(human)
