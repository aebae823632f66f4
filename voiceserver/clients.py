"""Who a request comes from: the identity that per-client limits count against.

A client is, in this order:

- the API key it presented (``key:#N``, the key's position in ``--api-key``; the key
  itself never appears), when the server has keys and the request carries a valid one;
- the connect token a socket was opened with (``token:<nonce>``): each token minted
  for a browser page is its own client;
- otherwise its network address (``address:<ip>``); an IPv6 address counts as its
  /64 prefix, since one host usually holds a whole /64. uvicorn has already replaced
  the peer address with ``X-Forwarded-For``'s when the peer is a trusted proxy
  (uvicorn's ``--forwarded-allow-ips``, loopback by default), so behind a proxy on
  the same host each end client is its own address.

Everything here is plain data: the engine client and the limit keepers take a
:class:`ClientId`, never a request.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from starlette.requests import HTTPConnection

from voiceserver.transport.auth import key_index, offered_key
from voiceserver.transport.tokens import TokenSigner

ClientKind = Literal["key", "token", "address"]

IPV6_PREFIX = 64
"""IPv6 addresses in one prefix of this length are one client."""


@dataclass(frozen=True, slots=True)
class ClientId:
    kind: ClientKind
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


UNKNOWN_ADDRESS = ClientId("address", "unknown")
"""A connection whose peer address the server does not know (a Unix socket)."""


def address_client(host: str | None) -> ClientId:
    """The client of a peer address (an IPv6 address counts as its /64)."""
    if not host:
        return UNKNOWN_ADDRESS
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return ClientId("address", host[:64])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ClientId("address", str(ip.ipv4_mapped))
        network = ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False)
        return ClientId("address", str(network))
    return ClientId("address", str(ip))


def client_of(
    conn: HTTPConnection,
    keys: tuple[str, ...],
    signer: TokenSigner | None = None,
    *,
    websocket: bool = False,
) -> ClientId:
    """Who ``conn`` (an HTTP request or a WebSocket) comes from. ``websocket``: also
    look at ``?token=`` and the ``bearer.`` subprotocol, as the socket's auth does."""
    offered = offered_key(conn.headers, conn.query_params if websocket else None)
    if offered is not None and keys:
        index = key_index(keys, offered)
        if index is not None:
            return ClientId("key", f"#{index + 1}")
        nonce = signer.nonce_of(offered) if signer is not None else None
        if nonce is not None:
            return ClientId("token", nonce)
    client = conn.scope.get("client")
    return address_client(client[0] if client else None)
