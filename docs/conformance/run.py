#!/usr/bin/env python3
"""A second reader of the GroupSync wire protocol, written from docs/PROTOCOL.md, checked against every
conformance vector in this folder (format: README.md). Python 3 standard library only.

    python3 docs/conformance/run.py [FILE.json ...]

Prints each failing vector and exits with status 1 if any fails.
"""
import base64
import hashlib
import json
import math
import pathlib
import re
import sys
import unicodedata

MAX_PAYLOAD = 10 << 20
MAX_DEPTH = 512
INT64 = range(-(1 << 63), 1 << 63)
IDENTIFIER = re.compile(r"[A-Za-z0-9._\-:@~]{1,128}\Z")
VERSION = 2
ROOT = "groupsync/v2/g"
# The range of every integer field (PROTOCOL.md#ranges), inclusive; a number outside is out-of-range.
TIME = range(0, 9_000_000_000_000 + 1)    # ms since 1970: epochs, createdAt, a clock's t (the year 2255)
COUNTER = range(0, 1 << 32)               # a clock's c
TTL = range(1, 1 << 32)                   # seconds: what an MQTT 5 Message Expiry Interval carries
INTERVAL = range(1, 32_767_500 + 1)       # heartbeat ms: half of MQTT's longest keepalive (65,535 s)
SEQ = range(1, 1 << 62)                   # an envelope's seq
POSITION = range(0, 1 << 62)              # $resend from/to, $skip through/lost, $position all/direct
SIZE = range(0, (1 << 53) + 1)            # a journal record's size in bytes
CHUNK_SIZE = range(1, 268_435_455 + 1)    # a chunk fits one MQTT packet
CHUNK_REQUEST = range(1, 65_536 + 1)      # chunks per $chunks request
INSTANT = 9e12                            # $ping/$pong instants: finite, within ±9e12 ms
ACTIVITY_TYPES = {"generic", "watchTogether", "listenTogether", "workoutTogether", "shopTogether",
                  "exploreTogether", "createTogether", "learnTogether", "playTogether", "readTogether"}


class Rejected(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def pairs(items):
    """Objects: a key twice (after unescaping, compared in NFC) is rejected."""
    seen = set()
    for key, _ in items:
        normalized = unicodedata.normalize("NFC", key)
        if normalized in seen:
            raise Rejected("duplicate-key")
        seen.add(normalized)
    return dict(items)


def integer(text):
    value = int(text)
    return value if value in INT64 else float(value)  # beyond 64 bits: not an integer


def number(text):
    value = float(text)
    if not math.isfinite(value):
        raise Rejected("bad-number")
    return value


def constant(name):
    raise Rejected("malformed")  # NaN, Infinity


def check(value, depth=0):
    """Nesting depth and unpaired surrogates (Python's json accepts both)."""
    if isinstance(value, (dict, list)):
        if depth >= MAX_DEPTH:
            raise Rejected("too-deep")
        for key in value if isinstance(value, dict) else ():
            check(key, depth + 1)
        for item in value.values() if isinstance(value, dict) else value:
            check(item, depth + 1)
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Rejected("invalid-utf8")


def parse(payload):
    if len(payload) > MAX_PAYLOAD:
        raise Rejected("too-large")
    if payload.startswith(b"\xef\xbb\xbf"):
        raise Rejected("bom")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("invalid-utf8")
    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=number,
                           parse_constant=constant)
    except (json.JSONDecodeError, RecursionError):
        raise Rejected("malformed")
    check(value)
    return value


def int_field(value, bounds):
    """An integer (its type first: not-an-integer, wrong-shape), then within its range (out-of-range)."""
    if type(value) is float:
        raise Rejected("not-an-integer")
    if type(value) is not int:
        raise Rejected("wrong-shape")
    if value not in bounds:
        raise Rejected("out-of-range")
    return value


class Fields:
    def __init__(self, value, record=True):
        if not isinstance(value, dict):
            raise Rejected("wrong-shape")
        self.object = value
        if record:
            v = value.get("v")
            if type(v) is not int or v != VERSION:
                raise Rejected("bad-version")

    def value(self, key):
        if key not in self.object:
            raise Rejected("wrong-shape")
        return self.object[key]

    def int(self, key, bounds):
        return int_field(self.value(key), bounds)

    def typed(self, key, kind):
        value = self.value(key)
        if type(value) is not kind:
            raise Rejected("wrong-shape")
        return value

    def str(self, key):
        return self.typed(key, str)

    def optional_str(self, key):
        return None if key not in self.object else self.str(key)

    def optional_int(self, key, bounds):
        return None if key not in self.object else self.int(key, bounds)

    def optional_bool(self, key):
        return None if key not in self.object else self.typed(key, bool)


def clock(value):
    f = Fields(value, record=False)
    return {"c": f.int("c", COUNTER), "p": f.str("p"), "t": f.int("t", TIME)}


def presence(value):
    f = Fields(value)
    record = {"epoch": f.int("epoch", TIME), "participant": f.str("participant"), "status": f.str("status"), "v": VERSION}
    if record["status"] not in ("online", "lost"):
        raise Rejected("wrong-shape")
    name = f.optional_str("name")
    if name is not None:
        record["name"] = name
    interval = f.optional_int("interval", INTERVAL)
    if interval is not None:
        record["interval"] = interval
    return record


def heartbeat(value):
    f = Fields(value)
    return {"epoch": f.int("epoch", TIME), "interval": f.int("interval", INTERVAL), "v": VERSION}


def announcement(value):
    f = Fields(value)
    activity = Fields(f.value("activity"), record=False)
    sealed = activity.optional_str("sealed")
    if sealed is not None:
        # Private (PROTOCOL.md#private-sessions): the data is the sealed text of data and metadata.
        if type(activity.value("data")) is not str or "metadata" in activity.object:
            raise Rejected("wrong-shape")
        read = {"data": activity.value("data"), "sealed": sealed, "type": activity.str("type")}
    else:
        metadata = Fields(activity.value("metadata"), record=False)
        meta = {"title": metadata.str("title"), "type": metadata.str("type")}
        if meta["type"] not in ACTIVITY_TYPES:
            meta["type"] = "generic"  # a type from a newer writer: shown as generic, never hidden
        subtitle = metadata.optional_str("subtitle")
        if subtitle is not None:
            meta["subtitle"] = subtitle
        read = {"data": activity.value("data"), "metadata": meta, "type": activity.str("type")}
    record = {"activity": read,
            "createdAt": f.int("createdAt", TIME), "createdBy": f.str("createdBy"), "revision": clock(f.value("revision")),
            "session": f.str("session"), "ttl": f.int("ttl", TTL), "v": VERSION}
    ended = f.optional_bool("ended")
    if ended is not None:
        record["ended"] = ended
    return record


def welcome(value):
    f = Fields(value)
    record = {"presences": [presence(p) for p in f.typed("presences", list)],
              "sessions": [announcement(a) for a in f.typed("sessions", list)], "v": VERSION}
    more = f.optional_bool("more")
    if more is not None:
        record["more"] = more
    return record


def observe(value):
    Fields(value)  # a record: an object with "v": 2; nothing else is read
    return {"v": VERSION}


def member(value):
    f = Fields(value)
    record = {"epoch": f.int("epoch", TIME), "participant": f.str("participant"), "v": VERSION}
    again = f.optional_bool("again")
    if again is not None:
        record["again"] = again
    return record


def state(value):
    f = Fields(value)
    record = {"clock": clock(f.value("clock")), "key": f.str("key"), "v": VERSION, "value": f.value("value")}
    sealed = f.optional_str("sealed")
    if sealed is not None:
        if type(record["value"]) is not str:  # private: the sealed text of the value
            raise Rejected("wrong-shape")
        record["sealed"] = sealed
    return record


DIGEST = re.compile(r"[0-9a-f]{64}\Z")


def attachment_id(digests):
    """The SHA-256 of the chunks' digests, each as its 32 bytes, one after another (PROTOCOL.md#the-journal-record)."""
    return hashlib.sha256(b"".join(bytes.fromhex(d) for d in digests)).hexdigest()


BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")


def base64_bytes(text):
    """The bytes of standard base64 with padding (RFC 4648), or none when it is not that: padding only at the end of
    the last four characters (Python's own decoder also takes padding after the end)."""
    return base64.b64decode(text) if BASE64.match(text) else b""


def journal(value):
    """A journal record (PROTOCOL.md#the-journal-record): size and chunkSize in their ranges (out-of-range), then
    consistent, its id that of its chunks' digests included (wrong-shape)."""
    f = Fields(value)
    chunks = f.typed("chunks", list)
    if not all(type(digest) is str for digest in chunks):
        raise Rejected("wrong-shape")
    record = {"added": clock(f.value("added")), "chunkSize": f.int("chunkSize", CHUNK_SIZE), "chunks": chunks, "id": f.str("id"),
              "name": f.str("name"), "size": f.int("size", SIZE), "v": VERSION}
    sealed = f.optional_str("sealed")
    if sealed is not None:
        # Private: name holds the sealed name, type and metadata; the chunks' salt is 16 bytes.
        salt = f.optional_str("salt")
        if "type" in f.object or "metadata" in f.object or salt is None or len(base64_bytes(salt)) != 16:
            raise Rejected("wrong-shape")
        record["sealed"], record["salt"] = sealed, salt
    elif "salt" in f.object:
        raise Rejected("wrong-shape")
    else:
        record["type"] = f.str("type")
    if sealed is None and "metadata" in f.object:
        metadata = f.typed("metadata", dict)
        if not all(type(text) is str for text in metadata.values()):
            raise Rejected("wrong-shape")
        record["metadata"] = metadata
    size, chunk_size = record["size"], record["chunkSize"]
    if (not DIGEST.match(record["id"]) or not all(DIGEST.match(d) for d in chunks)
            or len(chunks) != -(-size // chunk_size) or attachment_id(chunks) != record["id"]):
        raise Rejected("wrong-shape")
    return record


def envelope(value):
    f = Fields(value)
    record = {"body": f.value("body"), "epoch": f.int("epoch", TIME), "reliable": f.typed("reliable", bool),
              "type": f.str("type"), "v": VERSION}
    seq = f.optional_int("seq", SEQ)
    if seq is not None:
        record["seq"] = seq
    sealed = f.optional_str("sealed")
    if sealed is not None:
        if type(record["body"]) is not str:  # private: the sealed text of the body
            raise Rejected("wrong-shape")
        record["sealed"] = sealed
    stream = f.optional_str("stream")
    if stream is not None:
        if stream != "all":
            raise Rejected("wrong-shape")
        record["stream"] = stream
    reader = CONTROL_BODIES.get(record["type"])
    if reader is not None:
        record["body"] = reader(Fields(record["body"], record=False))
    return record


def stream_name(f):
    name = f.str("stream")
    if name not in ("all", "direct"):
        raise Rejected("wrong-shape")
    return name


def catchup_body(body):
    states, members = body.typed("states", list), body.typed("members", list)
    record = {"members": [member(m) for m in members], "states": [state(s) for s in states]}
    more = body.optional_bool("more")
    if more is not None:
        record["more"] = more
    if "journal" in body.object:
        record["journal"] = [journal(j) for j in body.typed("journal", list)]
    if "holders" in body.object:
        record["holders"] = [holders_entry(Fields(h, record=False)) for h in body.typed("holders", list)]
    return record


def holders_entry(f):
    entry = {"id": f.str("id"), "participants": f.typed("participants", list)}
    if not all(type(p) is str for p in entry["participants"]):
        raise Rejected("wrong-shape")
    if not DIGEST.match(entry["id"]) or not all(IDENTIFIER.match(p) for p in entry["participants"]):
        raise Rejected("wrong-shape")
    return entry


def chunks_body(body):
    record = {"id": body.str("id")}
    record["from"] = body.int("from", SIZE)
    record["count"] = body.int("count", CHUNK_REQUEST)
    if not DIGEST.match(record["id"]):
        raise Rejected("wrong-shape")
    return record


def have_body(body):
    record = {"id": body.str("id")}
    if not DIGEST.match(record["id"]):
        raise Rejected("wrong-shape")
    return record


def resend_body(body):
    record = {"from": body.int("from", POSITION), "stream": stream_name(body)}
    to = body.optional_int("to", POSITION)
    if to is not None:
        record["to"] = to
    return record


def skip_body(body):
    through = body.int("through", POSITION)
    lost = []
    for pair in body.typed("lost", list):
        if type(pair) is not list or len(pair) != 2:
            raise Rejected("wrong-shape")
        first, last = int_field(pair[0], POSITION), int_field(pair[1], POSITION)
        if not 1 <= first <= last <= through:  # each bound's range first, then their order
            raise Rejected("wrong-shape")
        lost.append([first, last])
    return {"lost": lost, "stream": stream_name(body), "through": through}


def position_body(body):
    direct = body.typed("direct", dict)
    return {"all": body.int("all", POSITION), "direct": {name: int_field(seq, POSITION) for name, seq in direct.items()}}


def instant(body, key):
    """A number of milliseconds since 1970, integer or not (wrong-shape otherwise), finite and within ±9e12
    (out-of-range otherwise)."""
    value = body.value(key)
    if type(value) not in (int, float):
        raise Rejected("wrong-shape")
    if not math.isfinite(value) or abs(value) > INSTANT:
        raise Rejected("out-of-range")
    return value


def ping_body(body):
    return {"t0": instant(body, "t0")}


def pong_body(body):
    record = {"t0": instant(body, "t0"), "t1": instant(body, "t1"), "t2": instant(body, "t2")}
    if record["t2"] < record["t1"]:
        raise Rejected("wrong-shape")
    return record


CONTROL_BODIES = {"$catchup": catchup_body, "$resend": resend_body, "$skip": skip_body, "$position": position_body,
                  "$ping": ping_body, "$pong": pong_body, "$chunks": chunks_body, "$have": have_body}


class Meaningless(Exception):
    """A state value of a key the protocol reserves that does not mean what the key says."""


def number_field(f, key):
    value = f.value(key)
    if type(value) not in (int, float):
        raise Rejected("wrong-shape")
    return value


def clock_value(value, writer):
    """groupsync.clock: {"reference", "base"}: its writer's claim, a base of 1 to 256 bytes (PROTOCOL.md#the-group-clock)."""
    f = Fields(value, record=False)
    record = {"base": f.str("base"), "reference": f.str("reference")}
    if record["reference"] != writer or not IDENTIFIER.match(record["reference"]) \
            or not record["base"] or len(record["base"].encode("utf-8")) > 256:
        raise Rejected("wrong-shape")
    return record


def timeline_value(value, writer):
    """groupsync.playback: the timeline, validated as PROTOCOL.md#the-timeline-record says."""
    f = Fields(value, record=False)
    record = {"at": number_field(f, "at"), "base": f.str("base"), "intent": number_field(f, "intent"),
              "position": number_field(f, "position"), "rate": number_field(f, "rate")}
    waiting = f.typed("waiting", list)
    if not all(type(p) is str and IDENTIFIER.match(p) for p in waiting) or len(waiting) > 1000:
        raise Rejected("wrong-shape")
    record["waiting"] = sorted(set(waiting))
    item = f.optional_str("item")
    if item is not None:
        if len(item.encode("utf-8")) > 1024:
            raise Rejected("wrong-shape")
        record["item"] = item
    if (record["position"] < 0 or abs(record["rate"]) > 64 or abs(record["intent"]) > 64 or abs(record["at"]) > 9e12
            or not record["base"] or len(record["base"].encode("utf-8")) > 256 or (waiting and record["rate"] != 0)):
        raise Rejected("wrong-shape")
    return record


# The state keys the protocol reserves, the reader of their values, and the code for a value that is not one.
MEANINGS = {"groupsync.clock": (clock_value, "bad-clock"), "groupsync.playback": (timeline_value, "bad-timeline")}


def meaning(record):
    """('accept', value) | ('reject', code) for a state record of a reserved key; None for other keys."""
    reader = MEANINGS.get(record["key"])
    if reader is None:
        return None
    try:
        return "accept", reader[0](record["value"], record["clock"]["p"])
    except Rejected:
        return "reject", reader[1]


def route(topic):
    """The reader for a topic and the identity check of its record; None outside the layout (chunks, under
    groupsync/v2-chunks, included: they are raw bytes, not records)."""
    levels = topic.split("/")
    if levels[:3] != ROOT.split("/") or not all(IDENTIFIER.match(level) for level in levels[3:]):
        return None
    match levels[3:]:
        case ["presence", participant]:
            return presence, lambda r: r["participant"] == participant
        case ["alive", _]:
            return heartbeat, lambda r: True
        case ["welcome", _, _]:
            return welcome, lambda r: True
        case ["observe", _]:
            return observe, lambda r: True
        case ["session", session, _]:
            return announcement, lambda r: r["session"] == session
        case ["s", _, "member", participant]:
            return member, lambda r: r["participant"] == participant
        case ["s", _, "state", key, writer]:
            return state, lambda r: r["key"] == key and r["clock"]["p"] == writer
        case ["s", _, "journal", attachment, owner]:
            return journal, lambda r: r["id"] == attachment and r["added"]["p"] == owner
        case ["s", _, "all", _] | ["s", _, "to", _, _]:
            return envelope, lambda r: True
    return None


def receive(topic, payload):
    """('accept', record) | ('reject', code) | ('cleared', None)"""
    routed = route(topic)
    if routed is None:
        return "reject", "bad-topic"
    reader, identity = routed
    if not payload and reader not in (envelope, heartbeat, welcome, observe):
        return "cleared", None
    try:
        record = reader(parse(payload))
    except Rejected as rejection:
        return "reject", rejection.code
    if not identity(record):
        return "reject", "identity-mismatch"
    if reader is announcement and not IDENTIFIER.match(record["activity"]["type"]):
        return "reject", "bad-identifier"
    return "accept", record


def expected_meaning(vector):
    if "meaning" not in vector:
        return None
    return ("accept", vector["meaning"]["accept"]) if "accept" in vector["meaning"] else ("reject", vector["meaning"]["reject"])


def expected(vector):
    if "accept" in vector:
        return "accept", vector["accept"]
    if "reject" in vector:
        return "reject", vector["reject"]
    return "cleared", None


def sealing_failures(file):
    """The vectors of a sealing file (PROTOCOL.md, Private sessions) that do not hold: (failures, total)."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent / "sealing"))
    import primitives  # the standard library's hashes and HMAC, and AES-256-GCM written out
    doc = parse(file.read_bytes())
    group_key = base64.b64decode(doc["group_key"]["base64"])
    failures = 0
    for vector in doc["vectors"]:
        info = f"session {doc['group']}/{vector['session']}".encode("utf-8")
        session_key = primitives.hkdf_sha256(group_key, b"groupsync/v2", info)
        if "session_key_hex" in vector:
            ok = session_key.hex() == vector["session_key_hex"]
        elif "salt" in vector:
            # A chunk: its attachment's key, and its index as the nonce; no nonce on the wire.
            chunk_key = primitives.hkdf_sha256(session_key, base64.b64decode(vector["salt"]), b"chunks")
            nonce, raw = vector["index"].to_bytes(12, "big"), base64.b64decode(vector["sealed"])
            opened = primitives.open_sealed(chunk_key, nonce, b"\x00\x00\x00\x05chunk", raw)
            if vector.get("opens", True):
                sealed = primitives.seal(chunk_key, nonce, b"\x00\x00\x00\x05chunk", vector["plaintext"].encode("utf-8"))
                ok = (chunk_key.hex() == vector["chunk_key_hex"] and sealed == raw and opened == vector["plaintext"].encode("utf-8")
                      and hashlib.sha256(raw).hexdigest() == vector["sealed_sha256"])
            else:
                ok = opened is None
        else:
            aad = b"".join(len(f.encode("utf-8")).to_bytes(4, "big") + f.encode("utf-8") for f in vector["context"])
            raw = base64_bytes(vector["sealed"])
            opened = primitives.open_sealed(session_key, raw[:12], aad, raw[12:]) if len(raw) >= 28 else None
            if vector.get("opens", True):
                nonce, plaintext = bytes.fromhex(vector["nonce_hex"]), vector["plaintext"].encode("utf-8")
                ok = raw == nonce + primitives.seal(session_key, nonce, aad, plaintext) and opened == plaintext
            else:
                ok = opened is None
        if not ok:
            failures += 1
            print(f"FAIL {file.name}: {vector['name']}")
    return failures, len(doc["vectors"])


def main(paths):
    folder = pathlib.Path(__file__).parent
    files = [pathlib.Path(p) for p in paths] or sorted(folder.glob("*.json")) + sorted(folder.glob("sealing/*.json"))
    failures = total = 0
    for file in files:
        if file.parent.name == "sealing":
            failed, count = sealing_failures(file)
            failures, total = failures + failed, total + count
            continue
        for vector in parse(file.read_bytes())["vectors"]:
            total += 1
            payload = (base64.b64decode(vector["payload_base64"]) if "payload_base64" in vector
                       else vector["payload"].encode("utf-8"))
            payload += b" " * (vector.get("pad_to", 0) - len(payload))
            got, want = receive(vector["topic"], payload), expected(vector)
            if got[0] == "accept" and "clock" in got[1] and "key" in got[1]:
                # A state record: what its value means, for the keys the protocol reserves.
                got, want = (got, meaning(got[1])), (want, expected_meaning(vector))
            if got != want:
                failures += 1
                print(f"FAIL {file.name}: {vector['name']}\n  expected {want}\n  got      {got}")
    print(f"{total - failures} of {total} vectors pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
