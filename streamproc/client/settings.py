"""How a command of ours that calls the gateway gets its key and its tokens (the ``client``
settings, docs/configuration.md): the DPoP key in the data directory, then a static token
(the command's ``--token`` or its environment variable) or the issuer's token endpoint with
client credentials. Neither configured is a usage error, never an anonymous request.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from yarl import URL

from streamproc.client.dpop import KEY_FILE, DpopKey
from streamproc.client.tokens import ClientCredentials, StaticToken, TokenSource
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Client

DPOP_KEY_ENV = env_name("client.dpop_key")
TOKEN_URL_ENV = env_name("client.token_url")
CLIENT_ID_ENV = env_name("client.client_id")
CLIENT_SECRET_ENV = env_name("client.client_secret")
SCOPES_ENV = env_name("client.scopes")


def client_of(configuration: Configuration) -> Client:
    """The process's typed ``[client]`` section, its secret as given (the decode
    strips what it types; a secret keeps its spaces)."""
    return msgspec.structs.replace(
        configuration.sections.client,
        client_secret=configuration.get(CLIENT_SECRET_ENV),
    )


def key_path(data_dir: Path, client: Client) -> Path:
    """Where this data directory's client key lives (``client.dpop_key`` overrides it)."""
    return Path(client.dpop_key or data_dir / KEY_FILE)


def dpop_key(data_dir: Path, client: Client) -> DpopKey:
    """This data directory's client key (``client.dpop_key`` overrides where it lives)."""
    return DpopKey.load_or_create(key_path(data_dir, client))


def absolute_http_url(name: str, value: str) -> str:
    """``value`` if it is an absolute http(s) URL without credentials, query or fragment."""
    try:
        u = URL(value)
    except ValueError:
        u = URL()
    if (
        u.scheme not in ("http", "https")
        or not u.host
        or u.user is not None
        or u.password is not None
        or u.query_string
        or u.fragment
    ):
        raise ConfigError(
            f"{name}={value!r}: an absolute http(s) URL without credentials, query or fragment"
        )
    return value


def token_source(
    key: DpopKey,
    *,
    token: str | None,
    token_flag: str,
    scopes: tuple[str, ...],
    client: Client,
) -> TokenSource:
    """A static ``token`` if given (``token_flag`` names where it came from), else client
    credentials from the ``client`` settings; :class:`ConfigError` when there is neither."""

    if token:
        return StaticToken(token, key, where=f"the token of {token_flag}")
    url, client_id, secret = client.token_url, client.client_id, client.client_secret
    if url and client_id and secret:
        wanted = tuple(w for s in client.scopes or () for w in s.split())
        return ClientCredentials(
            absolute_http_url(TOKEN_URL_ENV, url), client_id, secret, key, scopes=wanted or scopes
        )
    missing = [n for n, v in ((TOKEN_URL_ENV, url), (CLIENT_ID_ENV, client_id),
                              (CLIENT_SECRET_ENV, secret)) if not v]  # fmt: skip
    raise ConfigError(
        f"no credentials for the gateway: give {token_flag} (a token bound to this client's "
        f"DPoP key {key.jkt}, {key.path}), or client credentials ({', '.join(missing)} "
        "unset); requests are never sent without a token"
    )
