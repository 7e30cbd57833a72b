"""TLS for the listeners (Python's ssl over OpenSSL), from the PEM files
named in engine.tls.

One server context serves both listeners: TLS 1.2 or newer, OpenSSL's
default cipher choice (create_default_context), no compression or
renegotiation. With client_ca_file the handshake requires a client
certificate signed by that CA (mutual TLS); authorization stays with the
bearer token.
"""

from __future__ import annotations

import ssl

from engine.server.config import ConfigError, TlsConfig


def server_context(config: TlsConfig) -> ssl.SSLContext | None:
    """The listeners' SSLContext, None for plain TCP; ConfigError naming the
    file when a certificate, key or CA cannot be loaded."""
    if not config.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    try:
        ctx.load_cert_chain(config.cert_file, config.key_file)
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot read TLS certificate or key: {exc.strerror}", where=exc.filename) from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load TLS certificate/key pair: {_reason(exc)}",
                          where=f"{config.cert_file}, {config.key_file}",
                          hint="PEM certificate chain in cert_file, its unencrypted private key in key_file") from None
    if config.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=config.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"cannot load the client CA bundle: {_reason(exc)}",
                              where=config.client_ca_file) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
