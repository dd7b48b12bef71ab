#!/usr/bin/env python3
"""A GroupSync participant in Python, written from docs/PROTOCOL.md alone.

It shows that the document is enough to interoperate with the Swift implementation, and the Swift
test suite `InteropTests` runs it beside Swift participants on a real mosquitto. Every rule below cites
the section of PROTOCOL.md it follows ("§Join" and so on).

Needs Python 3 and paho-mqtt 1.6 (Debian: python3-paho-mqtt), MQTT 5.

Usage:

    participant.py --broker 127.0.0.1:1883 --group G --participant P
                   [--session S | --activate TYPE [--title T] [--data JSON]]
                   [--name NAME] [--password PW] [--keepalive N] [--ttl SECONDS] [--catchup-timeout SECONDS]
                   [--secret-file F]

It connects and follows the group, then joins session S (once its announcement is read), or announces
a new session of activity TYPE and joins it. Reliable messages are numbered per stream, kept in a
bounded outbox and recovered end to end (§Reliable delivery). Commands are JSON lines on stdin:

    {"op":"join","session":"S"}
    {"op":"set","key":"k","value":1}
    {"op":"send","type":"Chat","body":{"text":"hi"}}                  reliable, to everyone
    {"op":"send","type":"Chat","body":{...},"to":["alice"],"reliable":false}
    {"op":"load","id":"…","owner":"alice","path":"/tmp/photo.jpg"}   an attachment of the journal
    {"op":"leave"}    {"op":"end"}    {"op":"close"}                   end of input also closes

Events are JSON lines on stdout, each with an "event" field:

    connected {epoch}    activated {session}   session {session, type, createdBy, data}
    joined {session, participants, state}     participants {session, active}
    value {session, key, value, writer}        message {session, type, from, body, direct, reliable}
    gap {session, from, stream, first, last, count}  (reliable messages the sender could not re-send)
    catchup {session, to}  (it answered a newcomer)
    attachment {session, id, owner, name, type, size, metadata}    removed {session, id, owner}
    loaded {session, id, owner, path, size, rejected}  (verified, at `path`; `rejected` bad chunks)
    sent {type, acknowledged}  (acknowledged by the broker, or queued while disconnected)
    left {session}    ended {session, by}    closed
    rejected {topic, reason}  (a message it ignored, with the docs/conformance code)    error {message}

With `--secret-file F` (one `ID BASE64` key per line, the first sealing) the group is private (§Private
sessions): it seals and opens message bodies, state values, the activity and the journal's records and
chunks with docs/conformance/sealing/primitives.py (the standard library only), and rejects what is in clear.

Not implemented: brokers without retained messages (`retain_available false`, §Connect, §Catch-up,
§Brokers without retained messages, §Observers: no welcomes), a silent sender's held messages (only its will, a
cleared member record or a newer epoch end its streams), and in §End step 3 clearing the ended copy
at once when the broker accepted every clear (paho 1.6 does not report PUBACK reason codes): it clears
its ended copy when it sees the last other copy cleared. Of §Journal, it lists and loads attachments but
adds none.
"""

import argparse
import base64
import pathlib
import collections
import hashlib
import os
import re
import json
import random
import string
import sys
import threading
import time
import unicodedata

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

VERSION = 2
MAX_PAYLOAD = 10 * 1024 * 1024          # §Decoding rules 1
MAX_DEPTH = 512                         # §Decoding rules 2
DAY_MS = 86_400_000                     # §Validation and rejection: plausibility
MAX_SEQ_JUMP = 1_000_000               # §Reliable delivery: plausibility
MAX_SEQ = 1 << 62
MAX_HELD = 10_000                       # messages held beyond a gap, per stream
OUTBOX_MESSAGES = 1000                  # §Reliable delivery: the outbox (Swift's default limits)
OUTBOX_BYTES = 8 * 1024 * 1024
RESEND_RETRY, RESEND_RETRY_MAX = 1.0, 8.0   # s: an unanswered $resend again, the wait doubling
PRESENCE_TTL = 3600                     # s, presence lifetime (§Lifetimes; Swift's default)
WINDOW = 16                             # §Journal, "Loading": chunks asked for at once (Swift's default)
STALL = 30.0                            # s without a verified chunk before a load fails
DIGEST = re.compile(r"[0-9a-f]{64}\Z")   # §Journal: a SHA-256, 64 lowercase hexadecimal digits
IDENTIFIER_CHARS = set(string.ascii_letters + string.digits + "._-:@~")
METADATA_TYPES = {"generic", "watchTogether", "listenTogether", "workoutTogether", "shopTogether",
                  "exploreTogether", "createTogether", "learnTogether", "playTogether", "readTogether"}


def now_ms():
    return int(time.time() * 1000)


def is_identifier(s):
    """§Identifiers: 1 to 128 bytes of A–Z a–z 0–9 . _ - : @ ~"""
    return isinstance(s, str) and 1 <= len(s) <= 128 and all(ch in IDENTIFIER_CHARS for ch in s)


def encode(obj):
    """§Conventions: compact JSON, keys sorted, `/` not escaped, raw UTF-8, optional fields omitted."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Keyring:
    """§Private sessions: the group's keys, the first sealing; a session key per session and key."""

    def __init__(self, text, group):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "conformance" / "sealing"))
        import primitives  # AES-256-GCM and HKDF-SHA256, standard library only
        self.primitives, self.group, self.keys = primitives, group, {}
        for line in text.splitlines():
            words = line.split()
            if words and not words[0].startswith("#"):
                if len(words) != 2 or len(base64_bytes(words[1])) != 32:
                    raise ValueError("a key line is `ID BASE64` of 32 bytes")
                self.keys.setdefault(words[0], base64_bytes(words[1]))
        if not self.keys:
            raise ValueError("no key")
        self.sealing = next(iter(self.keys))  # the first key seals (dicts keep their order)
        self.session_keys = {}

    def session_key(self, sid, key_id):
        if key_id not in self.keys:
            return None
        if (sid, key_id) not in self.session_keys:
            info = f"session {self.group}/{sid}".encode("utf-8")
            self.session_keys[(sid, key_id)] = self.primitives.hkdf_sha256(self.keys[key_id], b"groupsync/v2", info)
        return self.session_keys[(sid, key_id)]

    @staticmethod
    def aad(context):
        return b"".join(len(f.encode("utf-8")).to_bytes(4, "big") + f.encode("utf-8") for f in context)

    def seal(self, sid, plaintext, context):
        """The sealed text (base64 of nonce ‖ ciphertext ‖ tag) of `plaintext` (bytes): a random nonce."""
        nonce = os.urandom(12)
        sealed = self.primitives.seal(self.session_key(sid, self.sealing), nonce, self.aad(context), plaintext)
        return base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, sid, key_id, text, context):
        """The plaintext of a sealed text, or None (no such key, not base64, does not open)."""
        key = self.session_key(sid, key_id)
        raw = base64_bytes(text)
        if key is None or len(raw) < 28:
            return None
        return self.primitives.open_sealed(key, raw[:12], self.aad(context), raw[12:])

    def chunk_key(self, sid, key_id, salt):
        key = self.session_key(sid, key_id)
        return None if key is None else self.primitives.hkdf_sha256(key, base64.b64decode(salt), b"chunks")

    def open_chunk(self, chunk_key, index, sealed):
        return self.primitives.open_sealed(chunk_key, index.to_bytes(12, "big"), self.aad(["chunk"]), sealed)

    def open_json(self, sid, key_id, text, context):
        """A sealed JSON value, read by §Decoding rules; raises Reject("sealed") when it does not open."""
        plaintext = self.open(sid, key_id, text, context) if isinstance(text, str) else None
        if plaintext is None:
            raise Reject("sealed")
        return decode_value(plaintext)


def fnv1a64(s):
    """§Catch-up: FNV-1a, 64 bit, over the UTF-8 bytes."""
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x00000100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# --- Decoding rules (§Decoding rules, §Validation and rejection) -------------------------------------

class Reject(Exception):
    """A message to ignore; `code` is the reason as named in docs/conformance."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class _Float(float):
    """A number written with a fraction or an exponent (rule 4 tells it from an integer)."""


def _parse_float(text):
    value = _Float(text)
    if value in (float("inf"), float("-inf")):
        raise Reject("bad-number")
    return value


def _parse_int(text):
    value = int(text)
    if abs(value) > 1.7976931348623157e308:
        raise Reject("bad-number")
    return value


def _no_constant(name):
    raise Reject("malformed")  # NaN, Infinity: not JSON


def _object(pairs):
    seen = set()
    for key, _ in pairs:
        normalized = unicodedata.normalize("NFC", key)
        if normalized in seen:
            raise Reject("duplicate-key")
        seen.add(normalized)
    return dict(pairs)


def _depth(text):
    """The deepest nesting of objects and arrays, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _check_strings(value):
    """Rule 2: a `\\u` escape must not leave a surrogate unpaired (Python keeps it in the str)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise Reject("invalid-utf8")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def decode(payload):
    """Rules 1–3: one strict JSON object with `"v": 2`."""
    return record(decode_value(payload))


def decode_value(payload):
    """Rules 1–2: one strict JSON value (a sealed body, value or activity, once opened)."""
    if len(payload) > MAX_PAYLOAD:
        raise Reject("too-large")
    if payload.startswith(b"\xef\xbb\xbf"):
        raise Reject("bom")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise Reject("invalid-utf8")
    if _depth(text) > MAX_DEPTH:
        raise Reject("too-deep")
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_float=_parse_float,
                           parse_int=_parse_int, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise Reject("malformed")
    _check_strings(value)
    return value


def record(value):
    """Rule 3 on an already parsed value (also for the records inside a `$catchup`)."""
    if not isinstance(value, dict):
        raise Reject("wrong-shape")
    v = value.get("v")
    if type(v) is not int or v != VERSION:
        raise Reject("bad-version")
    return value


def integer(obj, field, optional=False):
    """Rule 4: a JSON integer in the signed 64-bit range (not `1.0`, not `1e0`)."""
    if field not in obj:
        if optional:
            return None
        raise Reject("wrong-shape")
    value = obj[field]
    if isinstance(value, _Float) or (type(value) is int and not -(1 << 63) <= value < (1 << 63)):
        raise Reject("not-an-integer")
    if type(value) is not int:
        raise Reject("wrong-shape")
    return value


def field(obj, name, kind, optional=False):
    """Rule 5: present with its type; optional ones absent or of their type (`null` is not absent)."""
    if name not in obj:
        if optional:
            return None
        raise Reject("wrong-shape")
    value = obj[name]
    if kind is bool:
        ok = type(value) is bool
    else:
        ok = isinstance(value, kind) and type(value) is not bool
    if not ok:
        raise Reject("wrong-shape")
    return value


def required(obj, name):
    if name not in obj:
        raise Reject("wrong-shape")
    return obj[name]


def clock(obj, writer=None):
    """An HLC timestamp (§Hybrid logical clock), plausible (§Validation and rejection)."""
    if not isinstance(obj, dict):
        raise Reject("wrong-shape")
    t, c, p = integer(obj, "t"), integer(obj, "c"), field(obj, "p", str)
    if writer is not None and p != writer:
        raise Reject("identity-mismatch")
    if t < 0 or c < 0 or c >= (1 << 32) or t > now_ms() + DAY_MS:
        raise Reject("implausible")
    return (t, c, p)


def presence_record(obj, participant):
    if field(obj, "participant", str) != participant:
        raise Reject("identity-mismatch")
    status = field(obj, "status", str)
    if status not in ("online", "lost"):
        raise Reject("wrong-shape")
    epoch = integer(obj, "epoch")
    field(obj, "name", str, optional=True)
    interval = integer(obj, "interval", optional=True)
    return status, epoch, interval


def member_record(obj, participant=None):
    name = field(obj, "participant", str)
    if participant is not None and name != participant:
        raise Reject("identity-mismatch")
    field(obj, "again", bool, optional=True)
    return name, integer(obj, "epoch")


def state_record(obj, key=None, writer=None):
    name = field(obj, "key", str)
    if (key is not None and name != key) or not is_identifier(name):
        raise Reject("identity-mismatch")
    required(obj, "value")
    return name, clock(required(obj, "clock"), writer)


def attachment_id(digests):
    """§Journal: the SHA-256 of the chunks' digests, each as its 32 bytes, one after another."""
    return hashlib.sha256(b"".join(bytes.fromhex(d) for d in digests)).hexdigest()


BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")


def base64_bytes(text):
    """§Private sessions: the bytes of standard base64 with padding, or none when it is not that (padding only at the
    end of the last four characters)."""
    return base64.b64decode(text) if isinstance(text, str) and BASE64.match(text) else b""


def journal_record(obj, attachment, owner):
    """§Journal, "The journal record": consistent (its `id` that of its chunks' digests), and matching its
    topic's `<id>` and `<owner>`."""
    chunks = field(obj, "chunks", list)
    sealed = field(obj, "sealed", str, optional=True)
    if sealed is not None:
        # §Private sessions: `name` holds name, type and metadata, sealed; the chunks' salt is 16 bytes.
        salt = field(obj, "salt", str, optional=True)
        if "type" in obj or "metadata" in obj or salt is None or len(base64_bytes(salt)) != 16:
            raise Reject("wrong-shape")
    elif "salt" in obj:
        raise Reject("wrong-shape")
    metadata = field(obj, "metadata", dict, optional=True) or {}
    if not all(type(d) is str for d in chunks) or not all(type(m) is str for m in metadata.values()):
        raise Reject("wrong-shape")
    size, chunk_size = integer(obj, "size"), integer(obj, "chunkSize")
    name, digest = field(obj, "name", str), field(obj, "id", str)
    kind = "" if sealed is not None else field(obj, "type", str)
    added = required(obj, "added")
    if not isinstance(added, dict):
        raise Reject("wrong-shape")
    t, c, p = integer(added, "t"), integer(added, "c"), field(added, "p", str)
    if (size < 0 or chunk_size < 1 or not DIGEST.match(digest) or not all(DIGEST.match(d) for d in chunks)
            or len(chunks) != -(-size // chunk_size) or attachment_id(chunks) != digest):
        raise Reject("wrong-shape")
    if digest != attachment or p != owner:
        raise Reject("identity-mismatch")
    record = {"name": name, "type": kind, "size": size, "chunkSize": chunk_size, "chunks": chunks, "metadata": metadata}
    if sealed is not None:
        record.update(sealed=sealed, salt=obj["salt"], added=(t, c, p), id=digest)
    return record


def announcement(obj, session):
    if field(obj, "session", str) != session:
        raise Reject("identity-mismatch")
    activity = field(obj, "activity", dict)
    if not is_identifier(field(activity, "type", str)):
        raise Reject("bad-identifier")
    if field(activity, "sealed", str, optional=True) is not None:
        # §Private sessions: the data is the sealed text of data and metadata.
        if not isinstance(required(activity, "data"), str) or "metadata" in activity:
            raise Reject("wrong-shape")
    else:
        metadata = field(activity, "metadata", dict)
        field(metadata, "title", str)
        field(metadata, "subtitle", str, optional=True)
        field(metadata, "type", str)  # an unknown kind reads as generic
        required(activity, "data")
    field(obj, "createdBy", str)
    integer(obj, "createdAt")
    revision = clock(required(obj, "revision"))
    if integer(obj, "ttl") < 1:
        raise Reject("wrong-shape")
    ended = field(obj, "ended", bool, optional=True)
    return revision, bool(ended)


def envelope(obj):
    """§Envelope; rule 5: `seq` and `stream` optional, `stream` is "all"."""
    kind = field(obj, "type", str)
    integer(obj, "epoch")
    seq = integer(obj, "seq", optional=True)
    reliable = field(obj, "reliable", bool)
    if field(obj, "stream", str, optional=True) not in (None, "all"):
        raise Reject("wrong-shape")
    required(obj, "body")
    if not kind.startswith("$") and reliable and seq is None:
        raise Reject("wrong-shape")  # a reliable app message has its place in a stream
    return obj


def control_body(kind, body):
    """The bodies of `$resend`, `$skip` and `$position` (§Envelope, rule 5)."""
    if not isinstance(body, dict):
        raise Reject("wrong-shape")
    if kind == "$position":
        integer(body, "all")
        direct = field(body, "direct", dict)
        for value in direct.values():
            if isinstance(value, _Float) or type(value) is not int:
                raise Reject("not-an-integer" if isinstance(value, _Float) else "wrong-shape")
        return body
    if field(body, "stream", str) not in ("all", "direct"):
        raise Reject("wrong-shape")
    if kind == "$resend":
        integer(body, "from")
        integer(body, "to", optional=True)
        return body
    through = integer(body, "through")
    previous = 0
    for pair in field(body, "lost", list):
        if not isinstance(pair, list) or len(pair) != 2:
            raise Reject("wrong-shape")
        first, last = integer({"f": pair[0]}, "f"), integer({"l": pair[1]}, "l")
        if not previous < first <= last <= through:
            raise Reject("wrong-shape")
        previous = last
    return body


# --- The participant -------------------------------------------------------------------------------

class Presence:
    """A participant's live connection as read from presence/ and alive/ (§Connect)."""

    def __init__(self, epoch, status, interval):
        self.epoch, self.status, self.interval = epoch, status, interval
        self.heard = time.monotonic()


class Session:
    """What the group's announcements say about one session (§Announcement)."""

    def __init__(self, sid):
        self.id = sid
        self.copies = {}          # publisher -> expiry (monotonic s)
        self.current = None       # the announcement with the largest revision
        self.revision = None
        self.type = None
        self.type_from = None     # the publisher whose copy fixed the activity type
        self.ended = False
        self.ended_by_me = False  # then its ended copy goes once every other copy is cleared


class Outbox:
    """§Reliable delivery, "The sender": per session, the seq of each stream, the latest reliable envelopes,
    and a mark per member. It outlives leaving the session: seq counts on across leaving and joining again
    (§Messages, "Sending")."""

    def __init__(self):
        self.latest = {"all": 0}  # stream ("all", or the recipient of a direct stream) -> latest seq
        self.unreliable = 0
        self.entries = collections.deque()  # (stream, seq, envelope), oldest first
        self.size = 0
        self.marks = {}           # member -> (member epoch, its "all" mark, its direct stream's mark)

    def next_seq(self, stream):
        self.latest[stream] = self.latest.get(stream, 0) + 1
        return self.latest[stream]

    def keep(self, stream, seq, env):
        """The oldest leave first, beyond 1,000 messages or 8 MiB."""
        self.entries.append((stream, seq, env))
        self.size += len(encode(env))
        while len(self.entries) > OUTBOX_MESSAGES or self.size > OUTBOX_BYTES:
            self.size -= len(encode(self.entries.popleft()[2]))

    def kept(self, stream):
        """seq -> envelope of what the outbox still has of a stream (always its latest ones)."""
        return {seq: env for s, seq, env in self.entries if s == stream}

    def mark(self, member, epoch):
        """How far the streams had got when this member's record (of this epoch) was first seen."""
        if self.marks.get(member, (None,))[0] != epoch:
            self.marks[member] = (epoch, self.latest["all"], self.latest.get(member, 0))


class Stream:
    """§Reliable delivery, "The receiver": one sender's stream, in the sender's member epoch."""

    def __init__(self):
        self.cursor = 0           # the last seq delivered or passed over
        self.started = False      # False until the stream's start is known (seq 1, or a $skip)
        self.held = {}            # seq -> envelope, beyond a gap
        self.asked = None         # the gap last asked for
        self.retry_at = 0.0
        self.backoff = RESEND_RETRY


class Joined:
    """The session this participant joins or has joined (§Join)."""

    def __init__(self, sid, ttl):
        self.id, self.ttl = sid, ttl
        self.phase = "joining"    # joining -> joined
        self.barrier = False
        self.catchup = False
        self.owed = []            # newcomers whose catch-up is ours once joined (§Catch-up)
        self.joined_at = None     # time.monotonic() when the join completed
        self.members = {}         # participant -> member epoch
        self.states = {}          # key -> winning record (dict), clock tuple in "_clock"
        self.state_topics = set()
        self.streams = {}         # (sender, "all" | "direct") -> Stream, in the sender's member epoch
        self.active = None        # last reported active set
        self.own_copy_revision = None
        self.attachments = {}     # (id, owner) -> journal record (§Journal)


class Load:
    """An attachment being loaded (§Journal, "Loading"): its chunk topics and what the network thread received."""

    def __init__(self, topics):
        self.topics = {topic: index for index, topic in enumerate(topics)}
        self.pending = set()      # asked for, not verified
        self.retry_at = {}        # index -> when to ask again for a rejected chunk (monotonic s)
        self.arrived = []         # (index, payload)


class Participant:
    def __init__(self, args):
        self.args = args
        self.me = args.participant
        self.root = f"groupsync/v{VERSION}/{args.group}"
        self.epoch = now_ms()                     # §Connect 2: once per process
        self.interval = args.keepalive * 1000 // 2  # §Heartbeats: keepalive / 2
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.out_lock = threading.Lock()
        self.latest = (0, 0)                      # the HLC (§Hybrid logical clock)
        self.outboxes = {}                        # session -> Outbox
        self.max_packet = None                    # the broker's Maximum Packet Size (CONNACK), if any
        self.presences = {}
        self.sessions = {}
        self.joined = None
        self.loading = None       # the Load in progress, if any
        self.owned = {}      # topic -> {"payload", "ttl", "kept", "published" (monotonic s)}
        self.connected = False
        self.ever_connected = False
        self.closing = False
        self.grace_from = time.monotonic()
        self.next_heartbeat = 0.0
        self.unsubacks = set()
        self.keyring = None       # §Private sessions, with --secret-file
        if args.secret_file:
            with open(args.secret_file, encoding="utf-8") as file:
                self.keyring = Keyring(file.read(), args.group)

        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(6))
        self.client = mqtt.Client(client_id=f"py-{self.me}-{suffix}", protocol=mqtt.MQTTv5)
        self.client.username_pw_set(self.me, args.password)  # §Connect 1: username = participant ID
        self.client.will_set(self.topic("presence", self.me), self.presence_payload("lost"), qos=1,
                             retain=True, properties=self.expiry(PRESENCE_TTL, PacketTypes.WILLMESSAGE))
        self.client.reconnect_delay_set(min_delay=1, max_delay=4)
        self.client.on_connect = self.on_connect
        self.client.on_disconnect = self.on_disconnect
        self.client.on_message = self.on_message
        self.client.on_unsubscribe = self.on_unsubscribe

    # --- helpers ---

    def topic(self, *levels):
        return "/".join((self.root,) + levels)

    def emit(self, event, **fields):
        fields["event"] = event
        with self.out_lock:
            sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
            sys.stdout.flush()

    @staticmethod
    def expiry(seconds, packet=PacketTypes.PUBLISH):
        props = Properties(packet)
        props.MessageExpiryInterval = max(1, int(seconds))
        return props

    def presence_payload(self, status):
        body = {"epoch": self.epoch, "participant": self.me, "status": status, "v": VERSION,
                "interval": self.interval}
        if self.args.name:
            body["name"] = self.args.name
        return encode(body)

    def publish_retained(self, topic, payload, ttl, keep=True):
        """QoS 1, retained, with the lifetime as Message Expiry Interval (§Lifetimes); owned from now."""
        self.owned[topic] = {"payload": payload, "ttl": ttl, "kept": keep, "published": time.monotonic()}
        return self.client.publish(topic, payload, qos=1, retain=True, properties=self.expiry(ttl))

    def clear(self, topic):
        """Empty retained payload, QoS 1: deleted (§Conventions)."""
        self.owned.pop(topic, None)
        return self.client.publish(topic, b"", qos=1, retain=True)

    def stop_keeping(self, topic):
        if topic in self.owned:
            self.owned[topic]["kept"] = False

    # --- hybrid logical clock (§Hybrid logical clock) ---

    def tick(self):
        now = now_ms()
        t, c = self.latest
        self.set_clock(*((now, 0) if now > t else (t, c + 1)))
        return {"c": self.latest[1], "p": self.me, "t": self.latest[0]}

    def set_clock(self, t, c):
        """§Hybrid logical clock: a counter past its range (2³² − 1) moves to the next ms."""
        self.latest = (t + 1, 0) if c > 0xFFFFFFFF else (t, c)

    def observe(self, remote):
        rt, rc = remote[0], remote[1]
        lt, lc = self.latest
        t = max(lt, rt, now_ms())
        if t == lt and t == rt:
            c = max(lc, rc) + 1
        elif t == lt:
            c = lc + 1
        elif t == rt:
            c = rc + 1
        else:
            c = 0
        self.set_clock(t, c)

    # --- connection (§Connect, §Reconnect) ---

    def start(self):
        host, port = self.args.broker.rsplit(":", 1)
        self.client.connect(host, int(port), keepalive=self.args.keepalive, clean_start=True)
        self.client.loop_start()
        threading.Thread(target=self.ticker, daemon=True).start()
        with self.lock:
            if not self.changed.wait_for(lambda: self.connected, timeout=10):
                raise SystemExit("could not connect to " + self.args.broker)
        self.emit("connected", epoch=self.epoch)

    def on_connect(self, client, userdata, flags, reason, properties):
        if reason.value != 0:
            self.emit("error", message=f"CONNACK {reason}")
            return
        with self.lock:
            # §Connect 4: one SUBSCRIBE, QoS 1, Retain Handling 0, no Retain As Published.
            client.subscribe([(self.topic(*f), SubscribeOptions(qos=1)) for f in
                              (("presence", "+"), ("alive", "+"), ("session", "+", "+"))])
            if self.joined:
                client.subscribe(self.session_filters(self.joined.id))
            if self.loading:  # §Journal, "Loading": the chunks still asked for
                topics = sorted(t for t, i in self.loading.topics.items()
                                if i in self.loading.pending and i not in self.loading.retry_at)
                if topics:
                    client.subscribe([(t, SubscribeOptions(qos=1)) for t in topics])
            # §Connect 5 on the first connection; §Reconnect: every owned retained message, presence
            # first, then announcement copies, member records, state records. Kept ones with their full
            # lifetime, the others with what is left of it.
            self.publish_retained(self.topic("presence", self.me), self.presence_payload("online"), PRESENCE_TTL)
            order = {"presence": 0, "session": 1, "member": 2, "state": 3}
            now = time.monotonic()

            def rank(topic):
                levels = topic[len(self.root) + 1:].split("/")
                return order.get(levels[0] if levels[0] != "s" else levels[2], 4)

            for topic in sorted(self.owned, key=rank):
                owned = self.owned[topic]
                if rank(topic) == 0:
                    continue
                left = owned["ttl"] if owned["kept"] else owned["ttl"] - (now - owned["published"])
                if left >= 1:
                    client.publish(topic, owned["payload"], qos=1, retain=True, properties=self.expiry(left))
                    if owned["kept"]:
                        owned["published"] = now
            # §Reliable delivery, "Closing the gap after a broker crash": after every reconnect.
            j = self.joined
            if self.ever_connected and j and j.phase == "joined":
                if any(self.outbox(j.id).latest.values()):
                    self.send_position(j)
                for member in sorted(set(j.members) - {self.me}):
                    for name in ("all", "direct"):
                        self.ask(j, member, name, j.streams.setdefault((member, name), Stream()))
            self.ever_connected = True
            self.max_packet = getattr(properties, "MaximumPacketSize", None)
            # §Heartbeats: a fresh grace period for everyone after a reconnect.
            self.grace_from = time.monotonic()
            self.next_heartbeat = 0.0
            self.connected = True
            self.changed.notify_all()

    def on_disconnect(self, client, userdata, reason, properties=None):
        with self.lock:
            self.connected = False

    def session_filters(self, sid):
        """§Join 1: the five filters, No Local on the broadcast one only."""
        return [(self.topic("s", sid, "member", "+"), SubscribeOptions(qos=1)),
                (self.topic("s", sid, "state", "+", "+"), SubscribeOptions(qos=1)),
                (self.topic("s", sid, "journal", "+", "+"), SubscribeOptions(qos=1)),
                (self.topic("s", sid, "to", self.me, "+"), SubscribeOptions(qos=1)),
                (self.topic("s", sid, "all", "+"), SubscribeOptions(qos=1, noLocal=True))]

    # --- the periodic work: heartbeats, silence, keeping, expiry ---

    def ticker(self):
        while True:
            time.sleep(0.25)  # §Heartbeats: silence checked every 0.25 s
            with self.lock:
                if self.closing:
                    return
                now = time.monotonic()
                if self.connected and now >= self.next_heartbeat:
                    self.client.publish(self.topic("alive", self.me),
                                        encode({"epoch": self.epoch, "interval": self.interval, "v": VERSION}), qos=0)
                    # On the interval's grid, so that the ticker's granularity does not stretch it.
                    step = self.interval / 1000
                    self.next_heartbeat = self.next_heartbeat + step if self.next_heartbeat + step > now else now + step
                if self.connected:
                    # §Lifetimes: keeping = the same bytes with the full lifetime every third of it.
                    for topic, owned in self.owned.items():
                        if owned["kept"] and now - owned["published"] >= owned["ttl"] / 3:
                            owned["published"] = now
                            self.client.publish(topic, owned["payload"], qos=1, retain=True,
                                                properties=self.expiry(owned["ttl"]))
                # §Lifetimes: a session whose every known copy has expired is over.
                for session in list(self.sessions.values()):
                    if session.copies and all(expiry <= now for expiry in session.copies.values()):
                        session.copies.clear()
                        self.session_over(session, None)
                if self.joined and self.joined.phase == "joined":
                    self.retry(self.joined)
                self.report_active()

    def silent(self, presence):
        """§Heartbeats: not heard of for 3 × its own interval − 0.5 s, at least 1 s."""
        if not presence.interval or not self.connected:
            return False
        bound = max(3 * presence.interval - 500, 1000) / 1000
        return time.monotonic() - max(presence.heard, self.grace_from) > bound

    def is_online(self, participant, epoch):
        presence = self.presences.get(participant)
        return (presence is not None and presence.status == "online" and presence.epoch == epoch
                and not self.silent(presence))

    def active(self):
        """§Member: active = member epoch equals the current online presence epoch."""
        j = self.joined
        result = {p for p, e in j.members.items() if p != self.me and self.is_online(p, e)}
        if j.phase == "joined":
            result.add(self.me)
        return sorted(result)

    def report_active(self):
        j = self.joined
        if j and j.phase == "joined":
            active = self.active()
            if active != j.active:
                j.active = active
                self.emit("participants", session=j.id, active=active)

    # --- receiving ---

    def on_message(self, client, userdata, msg):
        with self.lock:
            loading = self.loading
            if loading and msg.topic in loading.topics:  # a chunk: raw bytes (§Journal, "Chunks")
                if msg.payload:  # an empty one was cleared: no chunk
                    loading.arrived.append((loading.topics[msg.topic], msg.payload))
                    self.changed.notify_all()
                return
        levels = msg.topic.split("/")
        if len(levels) < 5 or "/".join(levels[:3]) != self.root or not all(map(is_identifier, levels[3:])):
            return  # §Identifiers: outside the layout, or not an identifier: ignored
        rest = levels[3:]
        try:
            with self.lock:
                if rest[0] == "presence" and len(rest) == 2:
                    self.on_presence(rest[1], msg.payload)
                elif rest[0] == "alive" and len(rest) == 2:
                    self.on_heartbeat(rest[1], msg.payload)
                elif rest[0] == "session" and len(rest) == 3:
                    self.on_announcement(rest[1], rest[2], msg)
                elif rest[0] == "s" and self.joined and rest[1] == self.joined.id:
                    kind = rest[2:]
                    if kind[0] == "member" and len(kind) == 2:
                        self.on_member(kind[1], msg)
                    elif kind[0] == "state" and len(kind) == 3:
                        self.on_state(kind[1], kind[2], msg)
                    elif kind[0] == "journal" and len(kind) == 3:
                        self.on_journal(kind[1], kind[2], msg.payload)
                    elif kind[0] == "all" and len(kind) == 2:
                        self.on_envelope(kind[1], msg.payload, direct=False)
                    elif kind[0] == "to" and len(kind) == 3 and kind[1] == self.me:
                        self.on_envelope(kind[2], msg.payload, direct=True)
                self.report_active()
                self.changed.notify_all()
        except Reject as reject:
            self.emit("rejected", topic=msg.topic, reason=reject.code)

    def plausible_epoch(self, epoch):
        if epoch < 0 or epoch > now_ms() + DAY_MS:
            raise Reject("implausible")

    def on_presence(self, participant, payload):
        """§Connect, "Presence messages and heartbeats"; §Stale wills."""
        if not payload:
            self.presences.pop(participant, None)  # offline, whatever the epoch
            if participant == self.me and self.connected and not self.closing:
                self.publish_retained(self.topic("presence", self.me), self.presence_payload("online"), PRESENCE_TTL)
            return
        status, epoch, interval = presence_record(decode(payload), participant)
        self.plausible_epoch(epoch)
        if participant == self.me:
            if status == "lost" and self.connected and not self.closing:
                self.publish_retained(self.topic("presence", self.me), self.presence_payload("online"), PRESENCE_TTL)
            return
        current = self.presences.get(participant)
        if status == "online":
            if (current and current.epoch > epoch and current.status == "online"
                    and not self.silent(current)):
                return  # an older process
            self.presences[participant] = Presence(epoch, "online", interval)
        elif current and current.epoch == epoch:
            current.status = "lost"  # a will ends only the connection it names
            j = self.joined
            if j and j.members.get(participant) == epoch:
                self.sender_gone(j, participant, forget=False)

    def on_heartbeat(self, participant, payload):
        obj = decode(payload)
        epoch, interval = integer(obj, "epoch"), integer(obj, "interval")
        self.plausible_epoch(epoch)
        if interval <= 0:
            raise Reject("wrong-shape")
        if participant == self.me:
            return
        current = self.presences.get(participant)
        if current and current.epoch > epoch and current.status == "online" and not self.silent(current):
            return
        if current and current.epoch == epoch:
            current.status, current.interval, current.heard = "online", interval, time.monotonic()
        else:
            self.presences[participant] = Presence(epoch, "online", interval)

    def on_announcement(self, sid, publisher, msg):
        """§Connect, "Announcements"."""
        session = self.sessions.get(sid)
        if not msg.payload:
            if session and publisher in session.copies:
                del session.copies[publisher]
                if session.ended_by_me and not set(session.copies) - {self.me}:
                    # §End: the ender clears its ended copy once the last copy from before the end is.
                    self.clear(self.topic("session", sid, self.me))
                elif not session.copies:
                    self.session_over(session, None)
            return
        obj = decode(msg.payload)
        revision, ended = announcement(obj, sid)
        obj = self.opened_announcement(obj)
        self.observe(revision)
        activity_type = obj["activity"]["type"]
        if session is None:
            session = self.sessions[sid] = Session(sid)
        if session.ended:
            session.copies.setdefault(publisher, time.monotonic() + obj["ttl"])
            return  # copies from before the end do not bring it back
        if session.type is not None and activity_type != session.type:
            creators_copy = publisher == obj["createdBy"] and session.type_from != session.current["createdBy"]
            if not creators_copy:
                raise Reject("foreign-type")
            session.current = session.revision = None  # the creator's copy makes the session again
        lifetime = getattr(msg.properties, "MessageExpiryInterval", None) or obj["ttl"]
        session.copies[publisher] = time.monotonic() + lifetime
        is_new = session.type is None or session.current is None
        if session.revision is None or revision > session.revision:
            session.current, session.revision = obj, revision
            if session.type != activity_type:
                session.type, session.type_from = activity_type, publisher
        if is_new and not ended:
            self.emit("session", session=sid, type=activity_type, createdBy=obj["createdBy"],
                      data=obj["activity"]["data"])
        if ended:
            self.session_over(session, publisher)
            return
        # §Announce: a joined participant follows a newer revision with its own copy.
        j = self.joined
        if j and j.id == sid and j.phase == "joined" and j.own_copy_revision is not None \
                and session.revision > j.own_copy_revision:
            self.publish_own_copy(session)

    def session_over(self, session, by):
        """An ended copy, `$end`, or no copy left (§End): clear what is mine of it, forget it.

        What it owns of the session is cleared even when it has left it (its copy and state records
        stay after a leave): under a strict ACL nobody else may clear them.
        """
        if session.ended:
            return
        session.ended = True
        prefixes = (self.topic("session", session.id) + "/", self.topic("s", session.id) + "/")
        for topic in [t for t in self.owned if t.startswith(prefixes)]:
            self.clear(topic)
        j = self.joined
        if j and j.id == session.id:
            self.client.unsubscribe([f for f, _ in self.session_filters(j.id)])
            self.joined = None
            self.emit("ended", session=session.id, by=by)
            self.changed.notify_all()

    def on_member(self, participant, msg):
        """§Join (barrier, reading member records), §Catch-up (who answers a newcomer)."""
        j = self.joined
        outbox = self.outbox(j.id)
        if not msg.payload:
            if participant != self.me:
                self.sender_gone(j, participant, forget=True)  # §Reliable delivery, "When the sender is gone"
                outbox.marks.pop(participant, None)
            j.members.pop(participant, None)
            return
        rec = decode(msg.payload)
        name, epoch = member_record(rec, participant)
        again = rec.get("again") is True
        if participant == self.me:
            if epoch == self.epoch:
                j.barrier = True
                self.changed.notify_all()
            return
        previous = j.members.get(participant)
        if previous is not None and previous != epoch:
            self.sender_gone(j, participant, forget=True)  # a newer epoch: its old streams end
        j.members[participant] = epoch
        outbox.mark(participant, epoch)
        if msg.retain:
            return  # stored records never trigger a catch-up
        if participant not in self.presences:
            self.presences[participant] = Presence(epoch, "online", None)  # a live record proves the connection
        if previous != epoch and not again:  # a record published again answers a join: it is none
            # A participant still joining counts itself among the candidates, as the others do.
            candidates = {p for p in self.active() if p != participant} | {self.me}
            responder = max(candidates, key=lambda c: (fnv1a64(participant + "/" + c), c))
            if responder == self.me and j.phase == "joined":
                self.send_catchup(j, participant)
                self.emit("catchup", session=j.id, to=participant)
            elif responder == self.me and participant not in j.owed:
                j.owed.append(participant)  # answered once joined

    @staticmethod
    def state_wire(rec):
        return {k: v for k, v in rec.items() if k != "_clock"}

    # --- §Private sessions ---

    @staticmethod
    def announcement_context(ann):
        r = ann["revision"]
        return ["announcement", ann["session"], ann["activity"]["type"], ann["createdBy"], str(ann["createdAt"]),
                r["p"], str(r["t"]), str(r["c"]), str(ann["ttl"]), "1" if ann.get("ended") else "0"]

    def opened_announcement(self, ann):
        """An announcement as kept: opened in a private group (Reject when in clear or it does not open),
        as it came otherwise (a sealed one stays closed: the session is private to us)."""
        sealed = ann["activity"].get("sealed")
        if self.keyring is None:
            return ann
        if sealed is None:
            raise Reject("not-sealed")
        if sealed not in self.keyring.keys:
            return ann
        inner = self.keyring.open_json(ann["session"], sealed, ann["activity"]["data"], self.announcement_context(ann))
        if not isinstance(inner, dict) or "data" not in inner or not isinstance(inner.get("metadata"), dict):
            raise Reject("sealed")
        return dict(ann, activity={"data": inner["data"], "metadata": inner["metadata"], "type": ann["activity"]["type"]})

    def wire_announcement(self, ann):
        """An announcement as published: its activity sealed in a private group."""
        if self.keyring is None or "sealed" in ann["activity"]:
            return ann
        inner = encode({"data": ann["activity"]["data"], "metadata": ann["activity"]["metadata"]})
        text = self.keyring.seal(ann["session"], inner, self.announcement_context(ann))
        return dict(ann, activity={"data": text, "sealed": self.keyring.sealing, "type": ann["activity"]["type"]})

    def opened_state(self, sid, rec):
        """A state record as kept: its value opened in a private group (Reject when in clear or it does not
        open); one sealed without a keyring is rejected too."""
        sealed = rec.get("sealed")
        if self.keyring is None:
            if sealed is not None:
                raise Reject("sealed")
            return rec
        if not isinstance(sealed, str):
            raise Reject("not-sealed")
        c = rec["clock"]
        value = self.keyring.open_json(sid, sealed, rec["value"], ["state", sid, rec["key"], c["p"], str(c["t"]), str(c["c"])])
        return {"clock": c, "key": rec["key"], "v": VERSION, "value": value}

    def message_context(self, sid, sender, env, recipient):
        seq = "" if env.get("seq") is None else str(env["seq"])  # a control message has none
        return ["message", sid, sender, recipient, str(env["epoch"]), seq, env["type"], "1" if env["reliable"] else "0"]

    def opened_envelope(self, sid, sender, env, direct):
        """An envelope as read, app or control message: its body opened in a private group (Reject when in
        clear or it does not open); one sealed without a keyring is rejected."""
        sealed = env.get("sealed")
        if self.keyring is None:
            if sealed is not None:
                raise Reject("sealed")
            return env
        if not isinstance(sealed, str):
            raise Reject("not-sealed")
        recipient = self.me if direct and env.get("stream") != "all" else ""
        body = self.keyring.open_json(sid, sealed, env["body"], self.message_context(sid, sender, env, recipient))
        return dict({k: v for k, v in env.items() if k != "sealed"}, body=body)

    def wire_state(self, sid, rec):
        """A state record as published: its value sealed in a private group."""
        if self.keyring is None:
            return rec
        c = rec["clock"]
        text = self.keyring.seal(sid, encode(rec["value"]), ["state", sid, rec["key"], c["p"], str(c["t"]), str(c["c"])])
        return dict(rec, value=text, sealed=self.keyring.sealing)

    def on_state(self, key, writer, msg):
        """§Shared state, "Read"."""
        j = self.joined
        j.state_topics.add(msg.topic)
        if not msg.payload:
            return  # removed: the value does not go back
        rec = decode(msg.payload)
        _, stamp = state_record(rec, key, writer)
        self.apply_state(j, self.opened_state(j.id, rec), stamp)

    def on_journal(self, attachment, owner, payload):
        """§Journal: a record lists the attachment, an empty payload removes it."""
        j = self.joined
        if not payload:
            if j.attachments.pop((attachment, owner), None) is not None:
                self.emit("removed", session=j.id, id=attachment, owner=owner)
            return
        rec = journal_record(decode(payload), attachment, owner)
        if self.keyring is None and "sealed" in rec:
            raise Reject("sealed")
        if self.keyring is not None:  # §Private sessions: open name, type and metadata; in clear is rejected
            if "sealed" not in rec:
                raise Reject("not-sealed")
            t, c, p = rec["added"]
            context = ["journal", j.id, attachment, p, str(t), str(c), rec["salt"], str(rec["size"]), str(rec["chunkSize"])]
            inner = self.keyring.open_json(j.id, rec["sealed"], rec["name"], context)
            if (not isinstance(inner, dict) or not isinstance(inner.get("name"), str) or not isinstance(inner.get("type"), str)
                    or not all(type(v) is str for v in (inner.get("metadata") or {}).values())):
                raise Reject("sealed")
            rec = dict(rec, name=inner["name"], type=inner["type"], metadata=inner.get("metadata") or {},
                       chunk_key=self.keyring.chunk_key(j.id, rec["sealed"], rec["salt"]))
        if j.attachments.get((attachment, owner)) != rec:
            j.attachments[(attachment, owner)] = rec
            self.emit("attachment", session=j.id, id=attachment, owner=owner, name=rec["name"], type=rec["type"],
                      size=rec["size"], metadata=rec["metadata"])

    def chunk_topic(self, sid, attachment, index, owner):
        """§Journal: `groupsync/v2-chunks/<group>/<session>/<id>.<index>/<owner>`."""
        return f"groupsync/v{VERSION}-chunks/{self.args.group}/{sid}/{attachment}.{index}/{owner}"

    def apply_state(self, j, rec, stamp):
        self.observe(stamp)
        current = j.states.get(rec["key"])
        if current is None or stamp > current["_clock"]:
            j.states[rec["key"]] = dict(rec, _clock=stamp)
            if j.phase == "joined":
                self.emit("value", session=j.id, key=rec["key"], value=rec["value"], writer=stamp[2])

    def on_envelope(self, sender, payload, direct):
        """§Messages, "Receiving"."""
        j = self.joined
        env = envelope(decode(payload))
        kind = env["type"]
        if kind.startswith("$"):
            env = self.opened_envelope(j.id, sender, env, direct)
        if kind == "$catchup":
            # Joining, or joined less than a catch-up timeout ago: a responder that was joining answers
            # once joined. A second whole one in that time is ignored.
            late = j.phase == "joined" and time.monotonic() > j.joined_at + self.args.catchup_timeout
            if sender not in j.members or late:
                raise Reject("unexpected-catchup")
            if j.phase == "joined" and j.catchup:
                return
            body = env["body"]
            if not isinstance(body, dict):
                raise Reject("wrong-shape")
            states = field(body, "states", list)
            members = field(body, "members", list)
            more = field(body, "more", bool, optional=True)
            for item in states:
                rec = record(item)
                _, stamp = state_record(rec)
                try:
                    opened = self.opened_state(j.id, rec)
                except Reject as rejection:  # §Private sessions: left out and rejected, the rest applies
                    self.emit("rejected", topic=f"$catchup from {sender}", reason=rejection.code)
                    continue
                self.apply_state(j, opened, stamp)
            for item in members:
                name, epoch = member_record(record(item))
                if name != self.me and not (j.phase == "joined" and name in j.members):
                    j.members[name] = epoch
                    if name not in self.presences:
                        self.presences[name] = Presence(epoch, "online", None)
            if not more:
                j.catchup = True  # the last part completes the join
            self.changed.notify_all()
            return
        if kind == "$end":
            if sender not in j.members:
                raise Reject("not-a-member")
            self.session_over(self.sessions.get(j.id) or Session(j.id), sender)
            return
        if kind == "$resend":
            if sender not in j.members:
                raise Reject("not-a-member")
            self.answer_resend(j, sender, control_body(kind, env["body"]))
            return
        if kind in ("$skip", "$position"):
            if j.members.get(sender) != env["epoch"]:
                raise Reject("not-a-member")
            body = control_body(kind, env["body"])
            if j.phase == "joined":
                self.apply_skip(j, sender, body) if kind == "$skip" else self.apply_position(j, sender, body)
            return
        if kind.startswith("$"):
            return  # an unknown control message
        if j.phase != "joined" or sender == self.me:
            return
        if j.members.get(sender) != env["epoch"]:
            raise Reject("not-a-member")
        env = self.opened_envelope(j.id, sender, env, direct)
        if not env["reliable"]:
            self.deliver(j, sender, env, direct)  # neither deduplicated nor ordered
            return
        # §Messages 4: a broadcast re-sent on our direct topic carries "stream":"all".
        name = "all" if not direct or env.get("stream") == "all" else "direct"
        self.receive(j, sender, name, env)

    def deliver(self, j, sender, env, direct):
        self.emit("message", session=j.id, type=env["type"], body=env["body"], direct=direct,
                  reliable=env["reliable"], **{"from": sender})

    def gap(self, j, sender, name, first, last):
        """A typed gap event in place of messages the sender could not re-send (§Reliable delivery)."""
        self.emit("gap", session=j.id, stream=name, first=first, last=last, count=last - first + 1,
                  **{"from": sender})

    # --- reliable delivery, the receiver (§Reliable delivery) ---

    def receive(self, j, sender, name, env):
        s = j.streams.setdefault((sender, name), Stream())
        seq = env["seq"]
        if seq < 1 or seq > MAX_SEQ or seq > s.cursor + MAX_SEQ_JUMP:
            raise Reject("implausible")
        if seq <= s.cursor or seq in s.held:
            return  # a duplicate
        s.held[seq] = env
        self.advance(j, sender, name, s)
        if len(s.held) > MAX_HELD:
            # Beyond 10,000 held: the lowest gap is given up.
            lowest = min(s.held)
            self.gap(j, sender, name, s.cursor + 1, lowest - 1)
            s.cursor, s.started = lowest - 1, True
            self.advance(j, sender, name, s)

    def advance(self, j, sender, name, s):
        """Deliver what is contiguous with the cursor; ask for the lowest gap left, if it is new."""
        while s.cursor + 1 in s.held and (s.started or s.cursor + 1 == 1):
            s.cursor += 1
            s.started = True
            self.deliver(j, sender, s.held.pop(s.cursor), name == "direct")
        if not s.held:
            s.asked = None
            return
        wanted = (s.cursor + 1 if s.started else 0, min(s.held) - 1)
        if wanted != s.asked:
            s.asked, s.backoff = wanted, RESEND_RETRY
            self.ask(j, sender, name, s, wanted[1])

    def ask(self, j, sender, name, s, to=None):
        """`$resend` of what this receiver misses of a stream: from its cursor + 1 (0 before its start)."""
        body = {"from": s.cursor + 1 if s.started else 0, "stream": name}
        if to is not None:
            body["to"] = to
        s.retry_at = time.monotonic() + s.backoff
        self.send_control(j, "$resend", body, sender)

    def apply_skip(self, j, sender, body):
        """The cursor moves to `through` (never back); held messages and `lost` ranges beyond the cursor
        come out in their order, the ranges as gap events."""
        name = body["stream"]
        s = j.streams.setdefault((sender, name), Stream())
        through = body["through"]
        if s.started and through <= s.cursor:
            return
        start = s.cursor + 1 if s.started else 1
        items = [(seq, "message", seq) for seq in s.held if seq <= through]
        for first, last in body["lost"]:
            first = max(first, start)
            while first <= last:  # split around what is held
                end = first
                while end + 1 <= last and end + 1 not in s.held:
                    end += 1
                if first not in s.held:
                    items.append((first, "gap", end))
                first = end + 1
        for seq, what, last in sorted(items):
            if what == "gap":
                self.gap(j, sender, name, seq, last)
            else:
                self.deliver(j, sender, s.held.pop(seq), name == "direct")
        s.cursor, s.started = max(s.cursor, through), True
        self.advance(j, sender, name, s)

    def apply_position(self, j, sender, body):
        """Ask for what this receiver misses of the streams a `$position` names."""
        for name, latest in (("all", body["all"]), ("direct", body["direct"].get(self.me, 0))):
            s = j.streams.setdefault((sender, name), Stream())
            missing = [seq for seq in range(s.cursor + 1, latest + 1) if seq not in s.held][:1]
            if latest > s.cursor and missing:
                self.ask(j, sender, name, s, latest)

    def sender_gone(self, j, sender, forget):
        """§Reliable delivery, "When the sender is gone": what is held comes out, with gap events for what
        is missing (not for a stream whose start it never learnt: that part may never have been owed)."""
        for name in ("all", "direct"):
            s = j.streams.get((sender, name))
            if s is None:
                continue
            for seq in sorted(s.held):
                if s.started and seq > s.cursor + 1:
                    self.gap(j, sender, name, s.cursor + 1, seq - 1)
                s.cursor, s.started = seq, True
                self.deliver(j, sender, s.held.pop(seq), name == "direct")
            s.asked = None
            if forget:
                del j.streams[(sender, name)]

    def retry(self, j):
        """A `$resend` unanswered for a second is sent again, the wait doubling up to 8 s."""
        now = time.monotonic()
        for (sender, name), s in j.streams.items():
            if s.held and now >= s.retry_at:
                s.backoff = min(s.backoff * 2, RESEND_RETRY_MAX)
                self.ask(j, sender, name, s, min(s.held) - 1)

    # --- reliable delivery, the sender (§Reliable delivery) ---

    def outbox(self, sid):
        return self.outboxes.setdefault(sid, Outbox())

    def answer_resend(self, j, requester, body):
        """On the requester's direct topic: a `$skip` for the prefix never re-sent, then the envelopes."""
        outbox = self.outbox(j.id)
        name = body["stream"]
        stream = "all" if name == "all" else requester
        latest = outbox.latest.get(stream, 0)
        first, to = body["from"], body.get("to")
        last = latest if to is None else to
        if first < 0 or last < 0 or last > latest or first > latest + 1 or (to is not None and first > to):
            self.send_position(j, requester)  # does not fit the stream: another epoch's, or forged
            return
        marks = outbox.marks.get(requester, (None, latest, latest))
        mark = marks[1] if name == "all" else marks[2]
        kept = outbox.kept(stream)
        oldest = min(kept) if kept else latest + 1
        through = min(latest, max(mark, oldest - 1))
        first = max(first, 1)
        if first <= through:
            lost = [[mark + 1, oldest - 1]] if mark + 1 <= oldest - 1 else []
            self.send_control(j, "$skip", {"lost": lost, "stream": name, "through": through}, requester)
        topic = self.topic("s", j.id, "to", requester, self.me)
        for seq in range(max(first, through + 1), last + 1):
            env = kept[seq] if name == "direct" else dict(kept[seq], stream="all")
            self.client.publish(topic, encode(env), qos=1)

    def send_position(self, j, to=None):
        """`$position`: the latest seq of each stream in this epoch (direct streams at 0 left out)."""
        outbox = self.outbox(j.id)
        direct = {p: seq for p, seq in outbox.latest.items() if p != "all" and p in j.members and seq > 0}
        self.send_control(j, "$position", {"all": outbox.latest["all"], "direct": direct}, to)

    # --- sending ---

    def send_envelope(self, j, kind, body, recipients, reliable):
        """§Messages, "Sending": numbered per stream and handed over in one step (under the lock); a
        reliable envelope is kept in the outbox."""
        outbox = self.outbox(j.id)
        infos = []
        for recipient in [None] if recipients is None else sorted(set(recipients)):
            stream = "all" if recipient is None else recipient
            if reliable:
                seq = outbox.next_seq(stream)
            else:
                outbox.unreliable += 1
                seq = outbox.unreliable
            env = {"body": body, "epoch": self.epoch, "reliable": reliable, "seq": seq, "type": kind, "v": VERSION}
            if self.keyring is not None:  # §Private sessions: the body sealed for its place
                context = self.message_context(j.id, self.me, env, "" if recipient is None else recipient)
                env = dict(env, body=self.keyring.seal(j.id, encode(body), context), sealed=self.keyring.sealing)
            if reliable:
                outbox.keep(stream, seq, env)
            topic = self.topic("s", j.id, *(("all", self.me) if recipient is None else ("to", recipient, self.me)))
            infos.append(self.client.publish(topic, encode(env), qos=1 if reliable else 0))
        return infos

    def send_control(self, j, kind, body, recipient=None):
        """Control messages: QoS 1, reliable, no seq (they are in no stream); sealed in a private group."""
        env = {"body": body, "epoch": self.epoch, "reliable": True, "type": kind, "v": VERSION}
        if self.keyring is not None:  # §Private sessions: the body sealed for its place, `seq` empty
            context = self.message_context(j.id, self.me, env, "" if recipient is None else recipient)
            env = dict(env, body=self.keyring.seal(j.id, encode(body), context), sealed=self.keyring.sealing)
        payload = encode(env)
        levels = ("all", self.me) if recipient is None else ("to", recipient, self.me)
        return self.client.publish(self.topic("s", j.id, *levels), payload, qos=1)

    def send_catchup(self, j, newcomer):
        """§Catch-up: the winning record of each key, in parts under the broker's Maximum Packet Size."""
        states = [self.wire_state(j.id, self.state_wire(j.states[k])) for k in sorted(j.states)]
        limit = (self.max_packet or MAX_PAYLOAD) - 1024  # room for the topic and the packet's header
        if self.keyring is not None:  # §Private sessions: the body goes sealed, base64 of nonce ‖ it ‖ tag
            limit = limit * 3 // 4 - 28
        parts, part = [], []
        for state in states:
            if part and len(encode({"members": [], "more": True, "states": part + [state]})) + 100 > limit:
                parts.append(part)
                part = []
            part.append(state)
        parts.append(part)
        for index, part in enumerate(parts):
            body = {"members": [], "states": part}
            if index < len(parts) - 1:
                body["more"] = True
            self.send_control(j, "$catchup", body, newcomer)

    def publish_own_copy(self, session):
        j = self.joined
        self.publish_retained(self.topic("session", session.id, self.me), encode(self.wire_announcement(session.current)), j.ttl)
        j.own_copy_revision = session.revision

    # --- commands (main thread) ---

    def wait(self, condition, timeout):
        with self.lock:
            return self.changed.wait_for(condition, timeout=timeout)

    def activate(self, activity_type, title, data):
        """§Announce (activate): a new session ID, revision = tick(now), the creator's copy."""
        sid = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(16))
        with self.lock:
            ann = {"activity": {"data": data, "metadata": {"title": title, "type": "generic"},
                                "type": activity_type},
                   "createdAt": now_ms(), "createdBy": self.me, "revision": self.tick(),
                   "session": sid, "ttl": self.args.ttl, "v": VERSION}
            self.publish_retained(self.topic("session", sid, self.me), encode(self.wire_announcement(ann)), self.args.ttl)
        self.emit("activated", session=sid)
        return sid

    def join(self, sid):
        """§Join, steps 1–5."""
        if not self.wait(lambda: sid in self.sessions and self.sessions[sid].current is not None, 10):
            self.emit("error", message=f"no announcement of session {sid}")
            return
        with self.lock:
            session = self.sessions[sid]
            if session.ended or self.joined:
                self.emit("error", message=f"cannot join {sid}")
                return
            if "sealed" in session.current["activity"]:
                self.emit("error", message=f"session {sid} is private (key {session.current['activity']['sealed']})")
                return
            j = self.joined = Joined(sid, session.current["ttl"])
            self.outbox(sid).marks.clear()  # §Reliable delivery: its own join forgets the marks
            self.client.subscribe(self.session_filters(sid))
            self.publish_retained(self.topic("s", sid, "member", self.me),
                                  encode({"epoch": self.epoch, "participant": self.me, "v": VERSION}), j.ttl)
        if not self.wait(lambda: j.barrier or self.joined is not j, 10):
            self.emit("error", message="no join barrier")
            return
        with self.lock:
            others = [p for p, e in j.members.items() if p != self.me and self.is_online(p, e)]
        if others:
            self.wait(lambda: j.catchup or self.joined is not j, self.args.catchup_timeout)
        with self.lock:
            if self.joined is not j:
                return
            j.phase = "joined"
            j.joined_at = time.monotonic()
            self.publish_own_copy(self.sessions[sid])
            j.active = self.active()
            for newcomer in j.owed:
                if newcomer in j.active:
                    self.send_catchup(j, newcomer)
                    self.emit("catchup", session=j.id, to=newcomer)
            state = {k: r["value"] for k, r in sorted(j.states.items())}
            self.emit("joined", session=sid, participants=j.active, state=state)

    def set_value(self, key, value):
        """§Shared state, "Write"."""
        with self.lock:
            j = self.joined
            if not j or j.phase != "joined" or not is_identifier(key):
                self.emit("error", message="set: not joined, or an invalid key")
                return
            rec = {"clock": self.tick(), "key": key, "v": VERSION, "value": value}
            stamp = (rec["clock"]["t"], rec["clock"]["c"], self.me)
            self.apply_state(j, rec, stamp)
            self.publish_retained(self.topic("s", j.id, "state", key, self.me), encode(self.wire_state(j.id, rec)), j.ttl)

    def send(self, kind, body, to, reliable):
        with self.lock:
            j = self.joined
            if not j or j.phase != "joined" or kind.startswith("$"):
                self.emit("error", message="send: not joined, or a reserved type")
                return []
            return self.send_envelope(j, kind, body, to, reliable)

    def leave(self):
        """§Leave: clear the member record, unsubscribe; the rest stays, no longer kept."""
        with self.lock:
            j = self.joined
            if not j:
                return None
            info = self.clear(self.topic("s", j.id, "member", self.me))
            for topic in list(self.owned):
                if topic.startswith(self.topic("session", j.id) + "/") or topic.startswith(self.topic("s", j.id) + "/"):
                    self.stop_keeping(topic)
            self.client.unsubscribe([f for f, _ in self.session_filters(j.id)])
            self.joined = None
            self.emit("left", session=j.id)
        return info

    def end(self):
        """§End: `$end`, the ended copy, then clear what it knows of."""
        with self.lock:
            j = self.joined
            if not j:
                return
            session = self.sessions[j.id]
            self.send_control(j, "$end", None)
            ended = dict(session.current, ended=True, revision=self.tick())
            self.publish_retained(self.topic("session", j.id, self.me), encode(self.wire_announcement(ended)), j.ttl, keep=False)
            for publisher in list(session.copies):
                if publisher != self.me:
                    self.clear(self.topic("session", j.id, publisher))
            for member in set(j.members) | {self.me}:
                self.clear(self.topic("s", j.id, "member", member))
            for topic in j.state_topics:
                self.clear(topic)
            for (attachment, owner), rec in j.attachments.items():  # the records, and the chunks they name
                self.clear(self.topic("s", j.id, "journal", attachment, owner))
                for index in range(len(rec["chunks"])):
                    self.clear(self.chunk_topic(j.id, attachment, index, owner))
            self.client.unsubscribe([f for f, _ in self.session_filters(j.id)])
            self.joined = None
            session.ended = session.ended_by_me = True
            self.emit("ended", session=j.id, by=self.me)

    def load(self, attachment, owner, path):
        """§Journal, "Loading": exact chunk topics a window at a time; each chunk verified (a bad one asked
        for again after a backoff; the record's id binds the digests, so nothing else is hashed), written
        in order to `<path>.partial`, renamed once every chunk is there."""
        with self.lock:
            j = self.joined
            rec = j.attachments.get((attachment, owner)) if j else None
            if rec is None:
                self.emit("error", message=f"load: no attachment {attachment} of {owner}")
                return
            digests, size, chunk_size = rec["chunks"], rec["size"], rec["chunkSize"]
            topics = [self.chunk_topic(j.id, attachment, index, owner) for index in range(len(digests))]
            loading = self.loading = Load(topics)
        rejected, attempts, held = 0, {}, {}
        next_index = requested = 0
        progress = time.monotonic()
        try:
            with open(path + ".partial", "wb") as out, self.lock:
                while next_index < len(digests):
                    now = time.monotonic()
                    if now - progress >= STALL:
                        self.emit("error", message=f"load: chunk {next_index} of {attachment} unavailable")
                        return
                    ask = []
                    while requested < min(next_index + WINDOW, len(digests)):
                        loading.pending.add(requested)
                        ask.append(requested)
                        requested += 1
                    for index, due in list(loading.retry_at.items()):
                        if due <= now:
                            del loading.retry_at[index]
                            ask.append(index)
                    if ask:
                        self.client.subscribe([(topics[i], SubscribeOptions(qos=1)) for i in ask])
                    if not loading.arrived:
                        self.changed.wait(0.05)
                    arrived, loading.arrived = loading.arrived, []
                    for index, payload in arrived:
                        if index not in loading.pending or index in loading.retry_at:
                            continue  # a copy of a chunk taken, or one arriving after a rejection
                        self.client.unsubscribe(topics[index])
                        if hashlib.sha256(payload).hexdigest() != digests[index]:
                            rejected += 1
                            attempts[index] = attempts.get(index, 0) + 1
                            loading.retry_at[index] = time.monotonic() + min(0.05 * 2 ** (attempts[index] - 1), 2.0)
                            continue
                        expected = min(chunk_size, size - index * chunk_size)
                        if rec.get("chunk_key") is not None:  # §Private sessions: verified, then opened
                            opened = self.keyring.open_chunk(rec["chunk_key"], index, payload) if len(payload) == expected + 16 else None
                            if opened is None:
                                self.emit("error", message=f"load: {attachment} does not verify: chunk {index} does not open")
                                return
                            payload = opened
                        if len(payload) != expected:
                            self.emit("error", message=f"load: {attachment} does not verify: chunk {index}'s length")
                            return
                        loading.pending.discard(index)
                        held[index] = payload
                        progress = time.monotonic()
                    while next_index in held:
                        chunk = held.pop(next_index)
                        out.write(chunk)
                        next_index += 1
            os.replace(path + ".partial", path)
            self.emit("loaded", session=j.id, id=attachment, owner=owner, path=path, size=rec["size"],
                      rejected=rejected)
        finally:
            with self.lock:
                self.loading = None
                if loading.pending:
                    self.client.unsubscribe([topics[i] for i in sorted(loading.pending)])
            if os.path.exists(path + ".partial"):
                os.remove(path + ".partial")

    def on_unsubscribe(self, client, userdata, mid, properties=None, reasons=None):
        with self.lock:
            self.unsubacks.add(mid)
            self.changed.notify_all()

    def close(self):
        """§Close: leave, clear the presence, UNSUBSCRIBE and wait for the UNSUBACK, DISCONNECT (0)."""
        pending = [self.leave()]
        with self.lock:
            self.closing = True
            self.owned.clear()
            pending.append(self.client.publish(self.topic("presence", self.me), b"", qos=1, retain=True))
        for info in pending:
            if info is not None:
                info.wait_for_publish(timeout=2)
        _, mid = self.client.unsubscribe([self.topic("presence", "+"), self.topic("alive", "+"),
                                          self.topic("session", "+", "+")])
        self.wait(lambda: mid in self.unsubacks, 2)
        self.client.disconnect()
        self.client.loop_stop()
        self.emit("closed")

    def run(self):
        self.start()
        if self.args.activate:
            self.join(self.activate(self.args.activate, self.args.title, json.loads(self.args.data)))
        elif self.args.session:
            self.join(self.args.session)
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                op = command["op"]
                if op == "join":
                    self.join(command["session"])
                elif op == "set":
                    self.set_value(command["key"], command["value"])
                elif op == "send":
                    infos = self.send(command["type"], command.get("body"), command.get("to"),
                                      command.get("reliable", True))
                    acknowledged = True
                    for info in infos:
                        try:
                            info.wait_for_publish(timeout=5)
                        except RuntimeError:  # not connected: paho sends it after the reconnect
                            acknowledged = False
                    self.emit("sent", type=command["type"], acknowledged=acknowledged)
                elif op == "leave":
                    info = self.leave()
                    if info is not None:
                        info.wait_for_publish(timeout=5)
                elif op == "load":
                    self.load(command["id"], command["owner"], command["path"])
                elif op == "end":
                    self.end()
                elif op == "close":
                    break
                else:
                    self.emit("error", message=f"unknown op {op}")
            except (ValueError, KeyError, TypeError) as error:
                self.emit("error", message=f"bad command {line.strip()}: {error}")
        self.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--broker", required=True, help="HOST:PORT")
    parser.add_argument("--group", required=True)
    parser.add_argument("--participant", required=True)
    parser.add_argument("--name", help="display name")
    parser.add_argument("--password", help="MQTT password (the username is the participant ID)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--session", help="join this session ID")
    choice.add_argument("--activate", metavar="TYPE", help="announce a new session of this activity type and join it")
    parser.add_argument("--title", default="Python session")
    parser.add_argument("--data", default="{}", help="the activity's data, JSON")
    parser.add_argument("--keepalive", type=int, default=5, help="MQTT keepalive, s (heartbeats every half)")
    parser.add_argument("--ttl", type=int, default=3600, help="lifetime of a new session's records, s")
    parser.add_argument("--catchup-timeout", type=float, default=2.0, help="s to wait for $catchup")
    parser.add_argument("--secret-file", help="the group's keys, one `ID BASE64` per line: a private group")
    args = parser.parse_args()
    for kind in ("group", "participant", "session", "activate"):
        value = getattr(args, kind)
        if value is not None and not is_identifier(value):
            parser.error(f"invalid {kind} {value!r}: use 1–128 characters from A–Z a–z 0–9 . _ - : @ ~")
    Participant(args).run()


if __name__ == "__main__":
    main()
