"""Who may talk to the service: the Host a request names, and the web page (origin) it comes from.

A server on the loopback interface is reachable from every web page the user opens: a page can POST to it without a
CORS preflight (`Content-Type: text/plain` is a "simple" request), and with DNS rebinding (its own name re-pointed at
127.0.0.1) read the answers too. So:

- `Host` must name this server: a loopback name or address (localhost, 127.x.x.x, ::1), the address it is bound to
  (and the --host given for it), any IP address when it listens on every interface (a rebinding page always sends a
  name), or a name of --allowed-hosts. Otherwise 400.
- A browser's cross-origin request is refused (403) unless --allowed-origins names its origin: `Origin`, when sent,
  must be the server's own origin, and `Sec-Fetch-Site`, when sent, must be same-origin or none (typed by the user). A
  top-level navigation (a link to the page) is let through: it can only show the user a page, never run work for
  another site. Clients that are not browsers send neither header and are not affected.

Starlette's TrustedHostMiddleware checks names only (this also needs loopback and wildcard-bind IP addresses) and
answers in plain text; its CORSMiddleware adds CORS headers but never refuses a request (the browser does, after the
server has done the work). The checks are here; CORSMiddleware answers preflights and adds the headers for the
origins allowed.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import socket
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host name spells, in any form a client may send (`127.1`, `[::1]`), or None for a name."""
    name = name.strip("[]")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        if not name or not all(c in "0123456789abcdefx." for c in name.lower()):
            return None
        try:  # inet_aton reads the short and hex forms (127.1, 0x7f.1) that curl and the OS resolver accept
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address


def is_loopback(name: str) -> bool:
    address = parse_ip(name)
    return address.is_loopback if address is not None else name.lower().rstrip(".") in LOOPBACK_NAMES


def split_host(value: str) -> tuple[str, int | None] | None:
    """(name, port) of a Host header (`name`, `name:port`, `[v6]:port`), the name lowercased without a final dot;
    None when it is malformed."""
    value = value.strip()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    else:
        name, colon, port = value.rpartition(":")
        if not colon:
            name, port = value, None
        elif ":" in name:  # an IPv6 address without brackets is not a valid Host
            return None
    if port is not None and not (port.isdigit() and port.isascii() and int(port) <= 65535):
        return None
    name = name.lower().rstrip(".")
    if not name or any(c.isspace() or c in "/@?#\\" for c in name):
        return None
    return name, int(port) if port else None


def _normal_origin(origin: str) -> str | None:
    """scheme://host:port of an Origin value, with its default port written, or None if it is not a URL origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    port = port or DEFAULT_PORTS[parts.scheme]
    host = parts.hostname.rstrip(".")
    return f"{parts.scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


@dataclasses.dataclass(frozen=True)
class AccessPolicy:
    """The hosts and origins the service answers (module docstring). `for_address` builds the default one."""

    hosts: frozenset[str] = frozenset()  # names and addresses (as parse_ip writes them) allowed in Host; "*": any
    any_address: bool = False  # any IP address in Host: the server listens on every interface
    origins: tuple[str, ...] = ()  # origins allowed cross-origin, as sent (http://example.com:8080); "*": any

    @classmethod
    def for_address(cls, host: str | None = "127.0.0.1", bound: str | None = None, allowed_hosts=(),
                    allowed_origins=()):
        """The policy of a server started with --host `host`, bound to the address `bound`."""
        names = set()
        for name in filter(None, (host, bound, *allowed_hosts)):
            address = parse_ip(name)
            parsed = split_host(name) if address is None else (str(address), None)
            if parsed is None:
                raise ValueError(f"{name!r} is not a host name or address")
            address = parse_ip(parsed[0])
            names.add(str(address) if address is not None else parsed[0])
        addresses = [parse_ip(name) for name in (host, bound) if name]
        wildcard = any(address is not None and address.is_unspecified for address in addresses)
        if wildcard:
            names.add(socket.gethostname().lower())  # no DNS lookup: getfqdn() could hang on a resolver
        origins = tuple(dict.fromkeys(o.strip() for o in allowed_origins if o.strip()))
        for origin in origins:
            if origin not in ("*", "null") and _normal_origin(origin) is None:
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], e.g. http://localhost:3000)")
        return cls(frozenset(names), wildcard, origins)

    def host_problem(self, value: str | None) -> str | None:
        if "*" in self.hosts:
            return None
        if value is None:
            return "missing (HTTP/1.1 requires it)"
        parsed = split_host(value)
        if parsed is None:
            return f"malformed: {value[:100]!r}"
        name = parsed[0]
        address = parse_ip(name)
        if address is not None:
            if address.is_loopback or self.any_address or str(address) in self.hosts:
                return None
        elif name in LOOPBACK_NAMES or name in self.hosts or any(
                pattern.startswith("*.") and name.endswith(pattern[1:]) for pattern in self.hosts):
            return None
        return (f"{value[:100]!r} does not name this server (a page that re-points its own name at this machine "
                "sends one like it); start the server with --allowed-hosts NAME to answer requests for NAME")

    def origin_allowed(self, origin: str) -> bool:
        if "*" in self.origins or origin in self.origins:
            return True
        normal = _normal_origin(origin)
        return normal is not None and normal in {_normal_origin(o) for o in self.origins if o not in ("*", "null")}

    def cross_origin_problem(self, method: str, scheme: str, host: str | None, headers) -> tuple[str, str] | None:
        """(header, why) when the request comes from a web page the service does not answer, else None."""
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site")
        allowed = origin is not None and self.origin_allowed(origin)
        if origin is not None and not allowed:
            parsed = split_host(host) if host else None
            own = parsed and _normal_origin(f"{scheme}://{host}")
            if own is None or _normal_origin(origin) != own:
                return "Origin", (f"a request from the web page {origin[:100]!r}, another origin: refused (start the "
                                  "server with --allowed-origins ORIGIN to answer that page)")
        if site is not None and site.lower() not in ("same-origin", "none") and not allowed:
            navigation = method in ("GET", "HEAD") and headers.get("sec-fetch-mode", "").lower() == "navigate"
            if not navigation:
                return "Sec-Fetch-Site", (f"a {site[:20]} request from another web page: refused (start the server "
                                          "with --allowed-origins ORIGIN to answer that page)")
        return None
