from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header

from service.auth.service import Caller, authenticate
from service.db import SessionDep
from service.errors import Unauthorized


def current_caller(
    session: SessionDep, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    if not authorization:
        raise Unauthorized("missing Authorization header: send 'Authorization: Bearer <api key>'")
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("Authorization header must be 'Bearer <api key>'")
    return authenticate(session, key.strip())


def current_tenant_id(caller: Annotated[Caller, Depends(current_caller)]) -> str:
    return caller.tenant_id


CurrentCaller = Annotated[Caller, Depends(current_caller)]
CurrentTenant = Annotated[str, Depends(current_tenant_id)]
