"""Error bodies in FastAPI's validation shape, so every 4xx names the field and the problem."""

from __future__ import annotations

from fastapi import HTTPException


def problem(status: int, field: str, message: str, kind: str = "value_error") -> HTTPException:
    loc = ["body", *field.split(".")] if field else []
    return HTTPException(status_code=status, detail=[{"loc": loc, "msg": message, "type": kind}])
