"""``/v1/suppressions`` and the RFC 8058 one-click ``/v1/unsubscribe/{token}``.

A suppression is written to the partition of its address, the same partition as that address's
sends; the API answers only once the broker has acknowledged it, and the fan-out checks that
partition up to its end before each send, so no send to the address starts after the answer.
An address is an email address or a phone number (E.164, ``+15551234567``: texts are
suppressed as emails are, keyed and partitioned by the number).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.auth import current_tenant
from api.errors import problem
from api.models import iso
from api.state import ApiState
from streams.adapters import sms_text
from streams.campaigns import recipients, suppressions, unsubscribe

router = APIRouter(tags=["suppressions"])
Tenant = Annotated[dict[str, Any], Depends(current_tenant)]


class SuppressionIn(BaseModel):
    """One of ``email`` and ``phone``."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(None, max_length=254)
    phone: str | None = Field(None, max_length=32, description="E.164, e.g. +15551234567")
    reason: str = Field("requested", max_length=500)


async def suppress(api: ApiState, tenant: str, email: str, reason: str, source: str) -> None:
    """The shared path (``streams.campaigns.suppressions``), as the SES feedback agent takes it."""
    record = suppressions.record(tenant, email, reason, source)
    await suppressions.suppress(api.emitter, record, api.conf.partitions)
    api.suppressions.put(suppressions.key(tenant, email), record)  # read back at once


def suppression_view(record: dict[str, Any]) -> dict[str, Any]:
    """A suppression as the API shows it: why, by whom, and for feedback which SES event."""
    address = record["email"]  # the record's address field: an email, or a phone (E.164)
    kind = "phone" if address.startswith("+") else "email"
    return {kind: address, "reason": record["reason"], "source": record["source"],
            "created": iso(record["created_ms"]), "feedback_id": record.get("feedback_id"),
            "ses_message_id": record.get("ses_message_id")}


def _address(raw: str, field: str | None = None) -> str:
    """An email address normalised, or a phone number (``+`` first) as E.164; a 422 naming
    ``field`` (by default the kind the value looks like) and the problem otherwise."""
    field = field or ("phone" if raw.startswith("+") else "email")
    if field == "phone":
        try:
            return sms_text.normalize_e164(raw)
        except ValueError as exc:
            raise problem(422, field, f"not a phone number: {exc}") from exc
    address = recipients.normalise(raw)
    if address is None:
        raise problem(422, field, "not an email address (a phone number begins with + and its "
                      "country code)")
    return address


@router.post("/v1/suppressions", status_code=201,
             summary="Suppress an address for this tenant; effective when this answers")
async def create_suppression(body: SuppressionIn, request: Request, tenant: Tenant
                             ) -> dict[str, Any]:
    if (body.email is None) == (body.phone is None):
        raise problem(422, "email", "give exactly one of email and phone")
    field = "email" if body.email is not None else "phone"
    address = _address(body.email or body.phone or "", field)
    api: ApiState = request.app.state.api
    name = tenant["tenant"]
    new = api.suppressions.get(suppressions.key(name, address)) is None
    with api.quotas.reserve(name, "suppressions", 1 if new else 0, tenant["max_suppressions"],
                            lambda: api.suppression_count(name)):
        await suppress(api, name, address, body.reason, "api")
    return {field: address, "reason": body.reason, "suppressed": True}


@router.get("/v1/suppressions", summary="The tenant's suppressed addresses, paged by address")
async def list_suppressions(request: Request, tenant: Tenant,
                            cursor: Annotated[str | None, Query(description="from next_cursor")]
                            = None, limit: Annotated[int, Query(ge=1, le=500)] = 100
                            ) -> dict[str, Any]:
    api: ApiState = request.app.state.api
    prefix = f"{tenant['tenant']}:"
    keys = api.suppressions.keys_for(tenant["tenant"], prefix + cursor if cursor else None, limit)
    items = [suppression_view(found) for k in keys
             if (found := api.suppressions.get(k)) is not None]
    return {"items": items,
            "next_cursor": keys[-1][len(prefix):] if len(keys) == limit else None}


@router.get("/v1/suppressions/{email}", summary="Whether and why an address is suppressed "
            "(as the API's view has read the suppressions so far)")
async def get_suppression(email: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    address = _address(email)
    found = request.app.state.api.suppressions.get(suppressions.key(tenant["tenant"], address))
    if found is None:
        raise problem(404, "email", "not suppressed")
    return suppression_view(found)


@router.delete("/v1/suppressions/{email}", status_code=204)
async def delete_suppression(email: str, request: Request, tenant: Tenant) -> Response:
    address = _address(email)
    api: ApiState = request.app.state.api
    await suppressions.lift(api.emitter, tenant["tenant"], address, api.conf.partitions)
    api.suppressions.put(suppressions.key(tenant["tenant"], address), None)
    return Response(status_code=204)


@router.post("/v1/unsubscribe/{token}", summary="RFC 8058 one-click unsubscribe (no auth: the "
             "signed token is the credential)")
async def one_click_unsubscribe(token: str, request: Request) -> dict[str, Any]:
    try:
        tenant, email, campaign_id = unsubscribe.verify(
            request.app.state.api.conf.unsubscribe_secret, token)
    except unsubscribe.BadToken as exc:
        raise problem(400, "token", str(exc)) from exc
    await suppress(request.app.state.api, tenant, email, f"one-click unsubscribe from "
                   f"campaign {campaign_id}", "unsubscribe")
    return {"email": email, "unsubscribed": True}
