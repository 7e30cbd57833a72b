"""The server's one error: ServeError, a refusal or failure with the HTTP
status it is answered with. The binary protocol sends the same code in its
error frame; a CLI prints it as any EngineError (one line, exit 1).

A refusal's kind is its status, not a class: a bad input or malformed
request 400, a refused token 401, over a limit 408/413/431, a full queue
429, an unloading model 503, a passed deadline 504. Only ListenError
derives from it: serve exits 98 on it, and start-up closes the listeners it
opened.

gRPC (engine.server.grpc_service) answers the same refusal with the code
GRPC_CODES gives its status, and the same message."""

from __future__ import annotations

from engine.errors import EngineError


class ServeError(EngineError):
    """`status`: the HTTP code (401, 413, 429, 504, ...), by default 400
    because most are refusals of a bad request; unused where no client is
    answered (start-up, a model that fails to load). `headers`: what the
    HTTP answer adds (Retry-After, WWW-Authenticate)."""

    def __init__(self, message: str, *, status: int = 400, headers=(), where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.status = status
        self.headers = list(headers)


# ServeError.status -> the gRPC status code name (grpc.StatusCode) the gRPC
# front end answers with; a status not listed is INTERNAL.
GRPC_CODES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED", 413: "RESOURCE_EXHAUSTED", 429: "RESOURCE_EXHAUSTED", 431: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 500: "INTERNAL",
}
