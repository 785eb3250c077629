"""The wire format of docs/protocol.md (1.2), client side: validation of what the
caller gives (keys, user names, secrets, durations, permits, holder values)
before anything is sent, request lines, and a strict parser of response
lines (a client that guesses could match an answer to the wrong request)."""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import math
import re
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from ._types import Holder, KeyState, Mode
from .errors import InvalidArgument

#: Longest key (and user name, and secret), in bytes.
MAX_KEY_LEN = 250
#: A request line is at most this many bytes including its LF.
MAX_LINE = 1024
#: An answer line stays under this many bytes including its LF (a `Q` or
#: `W` answer lists up to 16 holders with their values).
MAX_ANSWER_LINE = 4096
#: The most permits a semaphore may have.
MAX_PERMITS = 10_000
#: Longest holder value, in bytes.
MAX_VALUE_LEN = 128
#: Holders a `Q` or `W` answer lists at most (`holders=` gives the count).
MAX_LISTED_HOLDERS = 16
#: Longest state tag a node sends: `<token>.<count>.<16 hex digits>`.
MAX_TAG_LEN = 64
#: The largest number of milliseconds a u64 carries.
MAX_MS = 2**64 - 1

Key = Union[str, bytes]
#: A holder's value: str (UTF-8; surrogate escapes stand for other bytes) or bytes.
Value = Union[str, bytes]
Seconds = Union[int, float, datetime.timedelta]


def _forbidden(byte: int) -> bool:
    return byte <= 0x20 or byte == 0x7F


def _utf8(text: Union[str, bytes], what: str, errors: str) -> bytes:
    """A str as UTF-8 (`errors` as for `str.encode`), bytes as they are."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8", errors)
        except UnicodeEncodeError as err:
            raise InvalidArgument(f"{what} is not valid UTF-8: {err}") from None
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise InvalidArgument(f"{what} must be str or bytes, not {type(text).__name__}")


def key_bytes(key: Key, what: str = "key") -> bytes:
    """The key as bytes, checked against the protocol's key rules: 1 to 250
    bytes, none a space, a control character or DEL."""
    raw = _utf8(key, what, "strict")
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


def value_bytes(value: Value) -> bytes:
    """A holder's value as bytes, checked: 1 to 128 bytes, none a space, a
    control character or DEL, and not exactly `-` (which means "no value")."""
    raw = _utf8(value, "value", "surrogateescape")
    if not raw or len(raw) > MAX_VALUE_LEN:
        raise InvalidArgument(f"value must be 1 to {MAX_VALUE_LEN} bytes, not {len(raw)}")
    if any(_forbidden(b) for b in raw):
        raise InvalidArgument("value has a space, a control character or DEL")
    if raw == b"-":
        raise InvalidArgument("value must not be exactly '-' (the protocol's 'no value')")
    return raw


def value_text(raw: bytes) -> str:
    """A value for the caller: UTF-8, other bytes as surrogate escapes, so
    that `text.encode("utf-8", "surrogateescape")` gives the bytes back."""
    return raw.decode("utf-8", "surrogateescape")


def check_permits(permits: int) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= MAX_PERMITS:
        raise InvalidArgument(f"permits must be an integer from 1 to {MAX_PERMITS}")
    return permits


def check_tag(tag: str) -> bytes:
    """A state tag given back to `W`, as a `KeyState.tag` gave it (or `-`)."""
    if isinstance(tag, str) and tag.isascii():
        raw = tag.encode("ascii")
        if raw and len(raw) <= MAX_TAG_LEN and not any(_forbidden(b) for b in raw):
            return raw
    raise InvalidArgument("seen must be a state tag from a KeyState (or '-')")


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


#: A 1.1 node's answer to a 1.2 request (`V`, `W`): `E ? ? unknown op`,
#: which the client matches to that request.
UNKNOWN_OP = "unknown op"

# Requests.


class AcquireOptions(NamedTuple):
    """Protocol 1.2's acquire options; the defaults send none (a 1.1 line)."""

    permits: int = 1
    shared: bool = False
    value: Optional[bytes] = None

    def text(self) -> bytes:
        out = b""
        if self.permits != 1:
            out += b" permits=" + str(self.permits).encode()
        if self.shared:
            out += b" mode=shared"
        if self.value is not None:
            out += b" value=" + self.value
        return out


def acquire_options(permits: int, shared: bool, value: Optional[Value]) -> AcquireOptions:
    """The options checked as the node would check them: nothing is sent
    when they are wrong."""
    check_permits(permits)
    if not isinstance(shared, bool):
        raise InvalidArgument("shared must be a bool")
    if shared and permits != 1:
        raise InvalidArgument("shared locks take no permits")
    return AcquireOptions(permits, shared, None if value is None else value_bytes(value))


def acquire_line(
    key: bytes, wait_ms: int, lease_ms: int, options: AcquireOptions = AcquireOptions()
) -> bytes:
    return (
        b"A " + key + b" " + seconds_text(wait_ms) + b" " + seconds_text(lease_ms)
        + options.text() + b"\n"
    )


def set_value_line(key: bytes, token: int, value: Optional[bytes]) -> bytes:
    return b"V " + key + b" " + str(token).encode() + b" " + (value or b"-") + b"\n"


def watch_line(key: bytes, wait_ms: int, seen: bytes) -> bytes:
    return b"W " + key + b" " + seconds_text(wait_ms) + b" " + seen + b"\n"


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

    kind: str  # A T R K V N M U Q W E S
    op: str  # the op it answers (A for T), the op named by N, M, E
    key: bytes  # b"" for S
    token: Optional[int] = None  # A
    addr: Optional[str] = None  # M; None for `-`
    reason: str = ""  # E
    state: Optional[KeyState] = None  # Q, W
    fields: Optional[Dict[str, str]] = None  # S

    @property
    def match_key(self) -> MatchKey:
        return (self.op, b"" if self.op == "S" else self.key)


class BadLine(Exception):
    """A line a Baton node would not send: the connection is dropped."""


_OPS = {"A", "R", "K", "Q", "S", "U", "V", "W", "?"}


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
    if k in ("T", "R", "K", "V"):
        (key,) = _fields(rest, 1)
        return Response(k, "A" if k == "T" else k, _key(key))
    if k == "U":
        (user,) = _fields(rest, 1)
        return Response("U", "U", _key(user))
    if k == "N":
        op, key = _fields(rest, 2)
        if op not in (b"R", b"K", b"V"):
            raise BadLine("N names an op other than R, K or V")
        return Response("N", op.decode(), _key(key))
    if k == "M":
        op, key, addr = _fields(rest, 3)
        return Response("M", _op(op), _key(key), addr=None if addr == b"-" else _text(addr))
    if k in ("Q", "W"):
        return _key_state(k, rest)
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


def _named(field: bytes, name: bytes) -> bytes:
    """The value of `name=value`, which must stand where it is."""
    if not field.startswith(name):
        raise BadLine(f"{name.decode()} out of place")
    return field[len(name):]


def _count(text: bytes) -> int:
    if not text.isdigit() or len(text) > 20:
        raise BadLine("bad count")
    return int(text)


def _lease(text: bytes) -> float:
    left = parse_seconds(text)
    if left is None:
        raise BadLine("bad lease")
    return left


def _tag(text: bytes) -> str:
    if not text or len(text) > MAX_TAG_LEN or not text.isascii() or any(_forbidden(b) for b in text):
        raise BadLine("bad state tag")
    return text.decode("ascii")


def _holder(text: bytes) -> Holder:
    """`<token>,<lease>,<value|->`: the value is last, so it may hold commas."""
    parts = text.split(b",", 2)
    if len(parts) != 3 or not parts[2] or len(parts[2]) > MAX_VALUE_LEN:
        raise BadLine("bad holder field")
    value = None if parts[2] == b"-" else value_text(parts[2])
    return Holder(_token(parts[0]), _lease(parts[1]), value)


def _key_state(kind: str, rest: bytes) -> Response:
    """A `Q` answer (1.1's four fields, then 1.2's for a key that is not
    plain) or a `W` answer (the same, and `state=` always last)."""
    parts = rest.split(b" ") if rest else []
    if len(parts) < 4 or any(not p for p in parts):
        raise BadLine(f"wrong number of fields in {kind}")
    key = _key(parts[0])
    token = _named(parts[1], b"token=")
    lease = _named(parts[2], b"lease=")
    waiters = _count(_named(parts[3], b"waiters="))
    more = parts[4:]
    tag = _tag(_named(more.pop(), b"state=")) if more and more[-1].startswith(b"state=") else None
    if kind == "W" and tag is None:
        raise BadLine("W answer without state")
    newest: Optional[Holder] = None
    if token != b"-" or lease != b"-":
        newest = Holder(_token(token), _lease(lease))
    if more:
        if tag is None:
            raise BadLine("Q answer with holders but no state")
        permits, mode, count, holders = _holders(more)
    else:
        permits, mode, count, holders = 1, "exclusive", int(newest is not None), (newest,) if newest else ()
    if (newest is None) != (count == 0):
        raise BadLine(f"{kind} token and holders disagree")
    if tag is None:
        tag = "-" if newest is None else str(newest.token)
    state = KeyState(
        key_text(key),
        None if newest is None else newest.token,
        None if newest is None else newest.lease_left,
        waiters,
        permits,
        mode,
        holders,
        count,
        tag,
    )
    return Response(kind, kind, key, state=state)


def _holders(fields: List[bytes]) -> Tuple[int, Mode, int, Tuple[Holder, ...]]:
    """`permits=<n> mode=<m> holders=<count> holder=...` (at most 16)."""
    if len(fields) < 3:
        raise BadLine("missing permits, mode or holders")
    permits = _count(_named(fields[0], b"permits="))
    if not 1 <= permits <= MAX_PERMITS:
        raise BadLine("bad permits")
    mode_text = _named(fields[1], b"mode=")
    if mode_text not in (b"exclusive", b"shared"):
        raise BadLine("bad mode")
    mode: Mode = "shared" if mode_text == b"shared" else "exclusive"
    count = _count(_named(fields[2], b"holders="))
    holders = tuple(_holder(_named(field, b"holder=")) for field in fields[3:])
    if len(holders) != min(count, MAX_LISTED_HOLDERS):
        raise BadLine("holder fields do not match holders=")
    return permits, mode, count, holders


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
