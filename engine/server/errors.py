"""The server's one error: ServeError, a refusal or failure with the HTTP
status it is answered with. The binary protocol sends the same code in its
error frame; a CLI prints it as any EngineError (one line, exit 1).

Only ListenError derives from it, because serve's exit status differs (98)
and start-up closes its listeners on it. What used to be one class per
status (auth, HTTP framing, JSON limits, a full queue, a passed deadline, an
unloaded model, a bad input) is a ServeError raised with its status."""

from __future__ import annotations

from engine.errors import EngineError


class ServeError(EngineError):
    """`status`: the HTTP code (401, 413, 429, 504, ...); `headers`: what the
    HTTP answer adds (Retry-After, WWW-Authenticate)."""

    def __init__(self, message: str, *, status: int = 400, headers=(), where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.status = status
        self.headers = list(headers)
