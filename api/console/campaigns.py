"""The campaigns pages: the tenant's campaigns with status and progress, a campaign's live
page (its progress polled as JSON, so the bar and counts move without a reload), a pasted
recipient list and its upload report, schedule, pause, resume, cancel, "did this address get
it?"; the suppression list: search, add, remove.

As on the jobs pages, the API's route functions do the reading and the ownership checks: a
campaign of another tenant is "not found".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Message

from api.console import paging
from api.console.web import SignedIn, back, posted, problem_text, render, signed_in, tenant_of
from api.routes import campaigns as api_campaigns
from api.routes import suppressions as api_suppressions
from api.routes.suppressions import SuppressionIn
from api.state import api_state

router = APIRouter()
Who = Annotated[SignedIn, Depends(signed_in)]


def _percent(view: dict[str, Any]) -> int:
    """How much of the campaign has an outcome (sent, suppressed, expired, failed...)."""
    total = view["recipients"]
    if not total:
        return 0
    done = total - view["counts"]["pending"]
    return min(100, round(100 * done / total))


@router.get("/campaigns")
async def campaigns_page(request: Request, who: Who, page: int = 0) -> Response:
    tenant = tenant_of(who)
    own = sorted((c for c in api_state(request).campaigns.values()
                  if c["tenant"] == tenant["tenant"]),
                 key=lambda c: c["created_ms"], reverse=True)
    start = max(0, page) * paging.PAGE
    rows = []
    for c in own[start:start + paging.PAGE]:
        view = await api_campaigns.get_campaign(c["campaign_id"], request, tenant)
        rows.append({"view": view, "percent": _percent(view)})
    return render(request, "campaigns.html", who, rows=rows, page=page,
                  more=len(own) > start + paging.PAGE)


async def _view(request: Request, tenant: dict[str, Any], campaign_id: str
                ) -> dict[str, Any] | None:
    try:
        view = await api_campaigns.get_campaign(campaign_id, request, tenant)
    except HTTPException as exc:
        if exc.status_code == 404:
            return None
        raise
    view["percent"] = _percent(view)
    return view


@router.get("/campaigns/{campaign_id}")
async def campaign_page(request: Request, campaign_id: str, who: Who, email: str = ""
                        ) -> Response:
    tenant = tenant_of(who)
    view = await _view(request, tenant, campaign_id)
    if view is None:
        return render(request, "error.html", who, status=404,
                      error=f"campaign {campaign_id} not found")
    lookup, lookup_error = None, None
    if email.strip():
        try:
            lookup = await api_campaigns.recipient_outcome(campaign_id, email.strip(), request,
                                                           tenant)
        except HTTPException as exc:
            lookup_error = problem_text(exc)
    return render(request, "campaign.html", who, c=view, email=email, lookup=lookup,
                  lookup_error=lookup_error)


@router.get("/campaigns/{campaign_id}/progress")
async def campaign_progress(request: Request, campaign_id: str, who: Who) -> Response:
    """What the campaign page polls: status, counts, rate, ETA and the percentage done."""
    view = await _view(request, tenant_of(who), campaign_id)
    if view is None:
        return JSONResponse({"detail": "not found"}, status_code=404)
    return JSONResponse({k: view[k] for k in ("status", "status_reason", "recipients", "counts",
                                              "rate_per_s", "eta_s", "percent")})


async def _upload(request: Request, tenant: dict[str, Any], campaign_id: str, csv_text: str
                  ) -> dict[str, Any]:
    """The pasted list through the API's own upload (``PUT .../recipients``: its saga, its
    parsing, its report), handed the text as the streamed CSV body that route reads."""
    body = csv_text.encode()
    headers = [(k, v) for k, v in request.scope["headers"]
               if k not in (b"content-type", b"content-length")]
    scope = {**request.scope, "headers": [*headers, (b"content-type", b"text/csv"),
                                          (b"content-length", str(len(body)).encode())]}
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        chunk, delivered = (b"" if delivered else body), True
        return {"type": "http.request", "body": chunk, "more_body": False}

    return await api_campaigns.upload_recipients(campaign_id, Request(scope, receive), tenant)


@router.post("/campaigns/{campaign_id}/upload")
async def upload(request: Request, campaign_id: str, who: Who) -> Response:
    """A recipient list pasted as CSV (a header with an ``email`` column), and the upload's
    report: accepted, duplicates, the bad rows with their line and reason. Lists over the form's
    512 KiB go through ``PUT /v1/campaigns/{id}/recipients``, which streams any size."""
    tenant = tenant_of(who)
    form = await posted(request, who)
    try:
        report = await _upload(request, tenant, campaign_id, form.get("csv", ""))
    except HTTPException as exc:
        if exc.status_code == 404:
            return render(request, "error.html", who, status=404,
                          error=f"campaign {campaign_id} not found")
        return back(request, f"/campaigns/{campaign_id}", f"upload refused: {problem_text(exc)}")
    view = await _view(request, tenant, campaign_id)
    return render(request, "campaign.html", who, c=view, email="", lookup=None,
                  lookup_error=None, report=report)


@router.post("/campaigns/{campaign_id}/{action}")
async def campaign_action(request: Request, campaign_id: str, action: str, who: Who
                          ) -> Response:
    tenant = tenant_of(who)
    await posted(request, who)
    handler = {"schedule": api_campaigns.schedule_campaign,
               "pause": api_campaigns.pause_campaign, "resume": api_campaigns.resume_campaign,
               "cancel": api_campaigns.cancel_campaign}.get(action)
    if handler is None:
        return render(request, "error.html", who, status=404, error=f"no action {action}")
    try:
        view = await handler(campaign_id, request, tenant)
    except HTTPException as exc:
        if exc.status_code == 404:
            return render(request, "error.html", who, status=404,
                          error=f"campaign {campaign_id} not found")
        return back(request, f"/campaigns/{campaign_id}", f"{action} refused: {problem_text(exc)}")
    return back(request, f"/campaigns/{campaign_id}", f"campaign is {view['status']}")


@router.get("/suppressions")
async def suppressions_page(request: Request, who: Who, q: str = "", cursor: str = ""
                            ) -> Response:
    """One address looked up, or the list paged by address."""
    tenant = tenant_of(who)
    found, error, items, next_cursor = None, None, [], None
    if q.strip():
        try:
            found = await api_suppressions.get_suppression(q.strip(), request, tenant)
        except HTTPException as exc:
            error = problem_text(exc)
    else:
        page = await api_suppressions.list_suppressions(request, tenant, cursor or None,
                                                        paging.PAGE)
        items, next_cursor = page["items"], page["next_cursor"]
    return render(request, "suppressions.html", who, q=q, found=found, error=error,
                  items=items, next_cursor=next_cursor)


@router.post("/suppressions")
async def suppress(request: Request, who: Who) -> Response:
    tenant = tenant_of(who)
    form = await posted(request, who)
    try:
        body = SuppressionIn(email=form.get("email", ""),
                             reason=form.get("reason") or "added in the console")
        result = await api_suppressions.create_suppression(body, request, tenant)
    except HTTPException as exc:
        return back(request, "/suppressions", f"not suppressed: {problem_text(exc)}")
    except ValueError as exc:  # pydantic's ValidationError is one
        return back(request, "/suppressions", f"not suppressed: {exc}")
    return back(request, "/suppressions", f"{result['email']} is suppressed")


@router.post("/suppressions/remove")
async def unsuppress(request: Request, who: Who) -> Response:
    tenant = tenant_of(who)
    form = await posted(request, who)
    try:
        await api_suppressions.delete_suppression(form.get("email", ""), request, tenant)
    except HTTPException as exc:
        return back(request, "/suppressions", f"not removed: {problem_text(exc)}")
    return back(request, "/suppressions", f"{form.get('email')} is no longer suppressed")
