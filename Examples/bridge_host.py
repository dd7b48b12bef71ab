#!/usr/bin/env python3
"""A sample host for `groupsync bridge`, with the Python standard library only.

Starts two bridges (alice and bob) in a fresh group; alice starts a session, bob joins it, both set the
shared value (one after the other, then at the same instant), each sends the other a message, and both
must end up showing the same value. Then both close stdin and must exit with code 0.

    python3 Examples/bridge_host.py [GROUPSYNC_BIN] [BROKER_URL]

GROUPSYNC_BIN defaults to $GROUPSYNC_BIN, then `groupsync` on the PATH; BROKER_URL to $GROUPSYNC_BROKER,
then mqtt://127.0.0.1:1883 (`groupsync broker` runs one). Exit code 0 on success, 1 with a message
otherwise. Every wait times out (10 s): this script never hangs.
"""

import json
import os
import random
import shutil
import string
import subprocess
import sys
import threading
import time

TIMEOUT = 10.0
ACTIVITY = "com.example.gallery"


class Failure(Exception):
    pass


class Bridge:
    """One `groupsync bridge` child process: requests in, answers and events out."""

    def __init__(self, binary, broker, group, participant):
        self.name = participant
        self.process = subprocess.Popen(
            [binary, "bridge", "--broker", broker, "--group", group, "--as", participant],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", bufsize=1,
        )
        self.events = []          # every event line, parsed, in order
        self.diagnostics = []     # stderr lines
        self.condition = threading.Condition()
        self.next_id = 1
        # Keep reading both pipes so that the bridge never blocks on a full pipe.
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "not-json", "line": line}
            with self.condition:
                self.events.append(event)
                self.condition.notify_all()
        with self.condition:
            self.events.append({"event": "eof"})
            self.condition.notify_all()

    def _read_stderr(self):
        for line in self.process.stderr:
            self.diagnostics.append(line.rstrip("\n"))

    def send_request(self, op, **fields):
        """Writes a request and returns its id (without waiting for the answer)."""
        request_id = self.next_id
        self.next_id += 1
        self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return request_id

    def answer(self, request_id):
        """Waits for the answer to `request_id`; raises Failure on an error answer."""
        answer = self.wait_for(lambda e: e.get("id") == request_id and e["event"] in ("ok", "error"),
                               f"the answer to request {request_id}")
        if answer["event"] == "error":
            raise Failure(f"{self.name}: request {request_id} failed: {answer['message']}")
        return answer

    def request(self, op, **fields):
        return self.answer(self.send_request(op, **fields))

    def wait_for(self, predicate, what, timeout=TIMEOUT):
        """Waits for an event matching `predicate` (looking at every event since the start)."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                    if event["event"] == "eof":
                        raise Failure(f"{self.name}: bridge exited while waiting for {what}; stderr: {self.diagnostics[-5:]}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failure(f"{self.name}: no {what} within {timeout:.0f} s; last events: {self.events[-5:]}")
                self.condition.wait(remaining)

    def latest(self, kind, **match):
        """The last event of `kind` whose fields include `match`, or None."""
        with self.condition:
            for event in reversed(self.events):
                if event["event"] == kind and all(event.get(k) == v for k, v in match.items()):
                    return event
        return None

    def close(self):
        """Closes stdin (the bridge leaves its session) and returns the exit code."""
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure(f"{self.name}: did not exit within {TIMEOUT:.0f} s after stdin was closed")

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def wait_until(condition, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise Failure(f"no {what} within {timeout:.0f} s")
        time.sleep(0.02)


def scenario(binary, broker):
    group = "host-" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    alice = Bridge(binary, broker, group, "alice")
    bob = Bridge(binary, broker, group, "bob")
    bridges = [alice, bob]
    try:
        # alice starts a session; bob joins exactly that one.
        started = alice.request("start", activity=ACTIVITY, title="Gallery paris", value={"gallery": "paris"}, keys=["index"])
        session = started["session"]
        print(f"alice started session {session}")
        bob.request("join", activity=ACTIVITY, session=session)
        bob.wait_for(lambda e: e["event"] == "session" and e["session"] == session and e["title"] == "Gallery paris",
                     "session event with the title")
        for bridge in bridges:
            bridge.wait_for(lambda e: e["event"] == "participants" and e["participants"] == ["alice", "bob"],
                            "participants alice and bob")
        print("both see participants alice, bob")

        # One after the other: each sees the other's value. bob never named the key: it is discovered.
        alice.request("set", key="index", value=1)
        bob.wait_for(lambda e: e["event"] == "value" and e["key"] == "index" and e["value"] == 1, "index 1 from alice")
        bob.request("set", key="index", value=2)
        alice.wait_for(lambda e: e["event"] == "value" and e["key"] == "index" and e["value"] == 2, "index 2 from bob")

        # At the same instant: both converge on one of the two values.
        first, second = alice.send_request("set", key="index", value=10), bob.send_request("set", key="index", value=20)
        alice.answer(first)
        bob.answer(second)

        def final(bridge):
            event = bridge.latest("value", key="index")
            return event and event["value"]

        wait_until(lambda: final(alice) == final(bob) and final(alice) in (10, 20), "agreement on index after 10 vs 20")
        print(f"simultaneous 10 vs 20: both show {final(alice)}")

        # Messages: to one participant, and to everyone.
        alice.request("send", value={"text": "hello bob"}, to=["bob"])
        bob.wait_for(lambda e: e["event"] == "message" and e["from"] == "alice" and e["value"] == {"text": "hello bob"},
                     "message from alice")
        bob.request("send", value="hello everyone")
        alice.wait_for(lambda e: e["event"] == "message" and e["from"] == "bob" and e["value"] == "hello everyone",
                       "message from bob")
        print("messages arrived both ways")

        # EOF: bob leaves and exits 0; alice sees him go, then exits 0 too.
        code = bob.close()
        if code != 0:
            raise Failure(f"bob exited with {code}; stderr: {bob.diagnostics[-5:]}")
        alice.wait_for(lambda e: e["event"] == "participants" and e["participants"] == ["alice"], "bob leaving")
        code = alice.close()
        if code != 0:
            raise Failure(f"alice exited with {code}; stderr: {alice.diagnostics[-5:]}")
        if final(alice) != final(bob):
            raise Failure(f"final values differ: alice {final(alice)}, bob {final(bob)}")
        print(f"OK: both bridges showed index {final(alice)} and exited with 0")
    finally:
        for bridge in bridges:
            bridge.kill()


def main(argv):
    binary = argv[1] if len(argv) > 1 else os.environ.get("GROUPSYNC_BIN") or shutil.which("groupsync")
    broker = argv[2] if len(argv) > 2 else os.environ.get("GROUPSYNC_BROKER", "mqtt://127.0.0.1:1883")
    if not binary:
        print("bridge_host: no groupsync binary: pass its path or set GROUPSYNC_BIN", file=sys.stderr)
        return 1
    try:
        scenario(binary, broker)
    except (Failure, OSError) as error:
        print(f"bridge_host: FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
