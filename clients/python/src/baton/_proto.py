"""The wire format of docs/protocol.md (1.1), client side: validation of what the
caller gives (keys, user names, secrets, durations) before anything is
sent, request lines, and a strict parser of response lines (a client that
guesses could match an answer to the wrong request)."""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import math
import re
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from .errors import InvalidArgument

#: Longest key (and user name, and secret), in bytes.
MAX_KEY_LEN = 250
#: A request line is at most this many bytes including its LF.
MAX_LINE = 1024
#: An answer line is at most this many bytes including its LF: a status
#: with many fields (and protocol 1.2's query answers) pass 1024.
MAX_ANSWER_LINE = 4096
#: The largest number of milliseconds a u64 carries.
MAX_MS = 2**64 - 1

Key = Union[str, bytes]
Seconds = Union[int, float, datetime.timedelta]


def _forbidden(byte: int) -> bool:
    return byte <= 0x20 or byte == 0x7F


def key_bytes(key: Key, what: str = "key") -> bytes:
    """The key as bytes, checked against the protocol's key rules: 1 to 250
    bytes, none a space, a control character or DEL."""
    if isinstance(key, str):
        try:
            raw = key.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidArgument(f"{what} is not valid UTF-8: {err}") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
    else:
        raise InvalidArgument(f"{what} must be str or bytes, not {type(key).__name__}")
    if not raw:
        raise InvalidArgument(f"{what} is empty")
    if len(raw) > MAX_KEY_LEN:
        raise InvalidArgument(f"{what} is {len(raw)} bytes, longer than {MAX_KEY_LEN}")
    if any(_forbidden(b) for b in raw):
        raise InvalidArgument(f"{what} has a space, a control character or DEL")
    return raw


def secret_bytes(secret: Key) -> bytes:
    """A secret checked like a key; the error never shows the secret."""
    try:
        return key_bytes(secret, "secret")
    except InvalidArgument as err:
        raise InvalidArgument(str(err)) from None


def key_text(key: bytes) -> str:
    """A key for messages and for the caller: UTF-8, undecodable bytes escaped."""
    return key.decode("utf-8", "backslashreplace")


def to_ms(value: Seconds, what: str, *, zero_ok: bool) -> int:
    """Seconds (int, float) or a timedelta as whole milliseconds, rounded up
    so a non-zero duration never becomes 0. Refuses negative, NaN, infinite,
    booleans and what a u64 of milliseconds cannot carry."""
    if isinstance(value, bool):
        raise InvalidArgument(f"{what} must be seconds or a timedelta, not a bool")
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        ms = -((-micros) // 1000)
    elif isinstance(value, int):
        ms = value * 1000
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise InvalidArgument(f"{what} must be a finite number of seconds")
        # repr is the shortest exact text of the float: 0.3 stays 0.3 ms-wise.
        ms = int((decimal.Decimal(repr(value)) * 1000).to_integral_value(decimal.ROUND_CEILING))
    else:
        raise InvalidArgument(
            f"{what} must be seconds (int or float) or a timedelta, not {type(value).__name__}"
        )
    if ms < 0:
        raise InvalidArgument(f"{what} must not be negative")
    if ms == 0 and not zero_ok:
        raise InvalidArgument(f"{what} must be greater than 0")
    if ms > MAX_MS:
        raise InvalidArgument(f"{what} is too large for the protocol")
    return ms


def seconds_text(ms: int) -> bytes:
    """Milliseconds as the protocol writes seconds: `30`, `0.5`, `2.125`."""
    whole, frac = divmod(ms, 1000)
    if frac == 0:
        return str(whole).encode()
    return f"{whole}.{frac:03d}".rstrip("0").encode()


def parse_seconds(text: bytes) -> Optional[float]:
    """`12.345` as seconds; None when it is not the protocol's form."""
    whole, dot, frac = text.partition(b".")
    if not whole.isdigit() or (dot and not (1 <= len(frac) <= 3 and frac.isdigit())):
        return None
    return float(text.decode())


# Requests.


def acquire_line(key: bytes, wait_ms: int, lease_ms: int) -> bytes:
    return b"A " + key + b" " + seconds_text(wait_ms) + b" " + seconds_text(lease_ms) + b"\n"


def release_line(key: bytes, token: int) -> bytes:
    return b"R " + key + b" " + str(token).encode() + b"\n"


def renew_line(key: bytes, token: int, lease_ms: int) -> bytes:
    return b"K " + key + b" " + str(token).encode() + b" " + seconds_text(lease_ms) + b"\n"


def query_line(key: bytes) -> bytes:
    return b"Q " + key + b"\n"


STATUS_LINE = b"S\n"


def auth_line(user: bytes, secret: bytes) -> bytes:
    return b"U " + user + b" " + secret + b"\n"


def check_token(token: int) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= MAX_MS:
        raise InvalidArgument("token must be an integer from 1 to 2**64-1")
    return token


# Responses.

#: What a response is matched on: (op, key), `b""` as the key of `S`.
MatchKey = Tuple[str, bytes]


class Response(NamedTuple):
    """One parsed response line."""

    kind: str  # A T R K N M U Q E S
    op: str  # the op it answers (A for T), the op named by N, M, E
    key: bytes  # b"" for S
    token: Optional[int] = None  # A, and Q while held
    addr: Optional[str] = None  # M; None for `-`
    reason: str = ""  # E
    lease_left: Optional[float] = None  # Q while held
    waiters: int = 0  # Q
    fields: Optional[Dict[str, str]] = None  # S

    @property
    def match_key(self) -> MatchKey:
        return (self.op, b"" if self.op == "S" else self.key)


class BadLine(Exception):
    """A line a Baton node would not send: the connection is dropped."""


_OPS = {"A", "R", "K", "Q", "S", "U", "?"}


def _token(text: bytes) -> int:
    if not text.isdigit() or len(text) > 20:
        raise BadLine("bad token")
    token = int(text)
    if not 0 < token <= MAX_MS:
        raise BadLine("bad token")
    return token


def _key(text: bytes) -> bytes:
    if not text or len(text) > MAX_KEY_LEN or any(_forbidden(b) for b in text):
        raise BadLine("bad key")
    return text


def _fields(rest: bytes, n: int) -> List[bytes]:
    parts = rest.split(b" ") if rest else []
    if len(parts) != n or any(not p for p in parts):
        raise BadLine("wrong number of fields")
    return parts


def parse_response(line: bytes) -> Response:
    """Parses one line given without its LF (a CR before it is dropped)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line:
        raise BadLine("empty line")
    kind, _, rest = line.partition(b" ")
    k = kind.decode("ascii", "replace")
    if k in ("A",):
        key, token = _fields(rest, 2)
        return Response("A", "A", _key(key), token=_token(token))
    if k in ("T", "R", "K"):
        (key,) = _fields(rest, 1)
        return Response(k, "A" if k == "T" else k, _key(key))
    if k == "U":
        (user,) = _fields(rest, 1)
        return Response("U", "U", _key(user))
    if k == "N":
        op, key = _fields(rest, 2)
        if op not in (b"R", b"K"):
            raise BadLine("N names an op other than R or K")
        return Response("N", op.decode(), _key(key))
    if k == "M":
        op, key, addr = _fields(rest, 3)
        return Response("M", _op(op), _key(key), addr=None if addr == b"-" else _text(addr))
    if k == "Q":
        return _query(rest)
    if k == "E":
        return _error(rest)
    if k == "S":
        return _status(rest)
    raise BadLine("unknown response kind")


def _op(field: bytes) -> str:
    op = field.decode("ascii", "replace")
    if op not in _OPS or op == "?":
        raise BadLine("unknown op")
    return op


def _text(field: bytes) -> str:
    try:
        return field.decode("utf-8")
    except UnicodeDecodeError:
        raise BadLine("not UTF-8") from None


def _query(rest: bytes) -> Response:
    key, token, lease, waiters = _fields(rest, 4)
    if not (token.startswith(b"token=") and lease.startswith(b"lease=")):
        raise BadLine("Q field out of place")
    if not waiters.startswith(b"waiters=") or not waiters[8:].isdigit():
        raise BadLine("bad waiters in Q")
    token, lease, count = token[6:], lease[6:], int(waiters[8:])
    if token == b"-" and lease == b"-":
        return Response("Q", "Q", _key(key), waiters=count)
    left = parse_seconds(lease)
    if left is None or left <= 0:
        raise BadLine("bad lease in Q")
    return Response("Q", "Q", _key(key), token=_token(token), lease_left=left, waiters=count)


def _error(rest: bytes) -> Response:
    parts = rest.split(b" ", 2)
    if len(parts) < 3 or not parts[0] or not parts[1]:
        raise BadLine("E without op, key and reason")
    op = parts[0].decode("ascii", "replace")
    if op not in _OPS:
        raise BadLine("unknown op in E")
    return Response("E", op, parts[1], reason=parts[2].decode("utf-8", "replace"))


def _status(rest: bytes) -> Response:
    fields: Dict[str, str] = {}
    for part in rest.split(b" ") if rest else []:
        name, eq, value = part.partition(b"=")
        if not eq or not name:
            raise BadLine("S field without =")
        fields[_text(name)] = _text(value)
    return Response("S", "S", b"", fields=fields)


def split_addr(addr: str) -> Tuple[str, int]:
    """`host:port` (or `[v6]:port`) as its host and port. The host is an IP
    address or a DNS name (labels of letters, digits, `-` and `_`, 1 to 63
    bytes each, none empty): a typo such as `a..b` is refused here, when
    the client is made, not when a background dial trips on it."""
    if not isinstance(addr, str):
        raise InvalidArgument(f"server address must be a str 'host:port', not {type(addr).__name__}")
    host, sep, port = addr.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"server address {addr!r} is not host:port")
    if not _ip_address(host) and (bracketed or not _dns_name(host)):
        raise InvalidArgument(f"server address {addr!r}: {host!r} is not a host name or an IP address")
    return host, int(port)


#: Longest DNS name, and longest label in it (RFC 1035).
MAX_HOST_LEN = 253
MAX_LABEL_LEN = 63
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?\Z")


def _ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _dns_name(host: str) -> bool:
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > MAX_HOST_LEN:
        return False
    return all(len(label) <= MAX_LABEL_LEN and _LABEL.match(label) for label in name.split("."))
