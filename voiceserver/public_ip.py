"""Whether an IP address is a public destination for a server-side fetch.

``ipaddress``'s ``is_global`` judges an IPv6 address by its own prefix only, yet
several IPv6 forms carry an IPv4 address that is what the packets reach:

- IPv4-mapped ``::ffff:a.b.c.d`` (the socket speaks IPv4 to ``a.b.c.d``);
- NAT64, RFC 6052's well-known prefix ``64:ff9b::/96``: a translator forwards to
  the embedded IPv4 address, loopback or private included;
- IPv4-compatible ``::a.b.c.d`` (deprecated, still routed by some stacks);
- 6to4 ``2002:AABB:CCDD::/48`` (relayed to ``A.B.C.D``) and Teredo ``2001::/32``
  (server and client IPv4 addresses inside).

Each counts as public only when the IPv4 address inside is public. The local-use
NAT64 prefix ``64:ff9b:1::/48`` (RFC 8215) may embed its IPv4 address at several
positions and is meant for one operator's network: never public.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_LOW_32 = (1 << 32) - 1


def is_public(address: str) -> bool:
    """``address`` (an IP literal, possibly with a ``%zone``) reaches a public host.
    ValueError when it is not an IP address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return _global(ip)
    if ip in NAT64_LOCAL_USE:
        return False
    translated = _translated(ip)
    if translated is not None:
        return _global(translated)
    return _global(ip) and all(_global(inner) for inner in _tunnelled(ip))


def _translated(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (the destination itself)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64_WELL_KNOWN or ip in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & _LOW_32)
    return None


def _tunnelled(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses a tunnelling IPv6 address sends its packets through."""
    inner = []
    if ip.sixtofour is not None:
        inner.append(ip.sixtofour)
    if ip.teredo is not None:
        inner.extend(ip.teredo)
    return inner


def _global(ip: IPAddress) -> bool:
    return ip.is_global and not ip.is_multicast
