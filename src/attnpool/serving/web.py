"""The web stack of ``attnpool serve`` (FastAPI, Starlette, uvicorn, pydantic), or which part of it is missing.

They are the optional extra ``attnpool[serve]``, yet :mod:`attnpool.api` imports :mod:`attnpool.serving` at its
top (the layering rules allow no imports of attnpool inside functions, nor does ``tests/test_architecture.py``
allow one in an indented block) and ``import attnpool`` must work without the extra. So every serving module
imports its attnpool neighbours unconditionally, and only this module imports the web stack, inside a ``try``:
the other modules reach it as ``web.FastAPI``, ``web.BaseModel``... at call time, never at import time, and
:func:`require` (called first by :func:`attnpool.serving.serve`) raises an ``ImportError`` that says
``pip install 'attnpool[serve]'``. Only a missing web-stack module is caught; any other import error is raised.
"""

from __future__ import annotations

OPTIONAL_MODULES = ("fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core")
MISSING_EXTRA = "attnpool serve needs FastAPI and uvicorn: pip install 'attnpool[serve]'"

try:
    import uvicorn
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, create_model
    from pydantic.functional_validators import model_validator
    from pydantic_core import PydanticCustomError
    from starlette.concurrency import run_in_threadpool
    from starlette.datastructures import Headers
    from starlette.exceptions import HTTPException
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
except ModuleNotFoundError as _err:
    if (_err.name or "").split(".")[0] not in OPTIONAL_MODULES:
        raise
    MISSING: ModuleNotFoundError | None = _err
    uvicorn = FastAPI = RequestValidationError = BaseModel = ConfigDict = Field = StrictBool = StrictInt = None
    StrictStr = create_model = run_in_threadpool = Headers = HTTPException = CORSMiddleware = Request = None
    HTMLResponse = JSONResponse = PlainTextResponse = Response = AfterValidator = PydanticCustomError = None
    ClientDisconnect = model_validator = None
else:
    MISSING = None


def require() -> None:
    """Raise the ``ImportError`` naming the extra when the web stack is missing; nothing when it is there."""
    if MISSING is not None:
        raise ImportError(f"{MISSING_EXTRA} ({MISSING})") from MISSING
