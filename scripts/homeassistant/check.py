#!/usr/bin/env python3
"""Drives `groupsync dashboard` against a real Home Assistant and reports what Home Assistant made of it.

Started by scripts/homeassistant-check.sh, which provides the Home Assistant venv, the groupsync binary and
a private mosquitto. Standard library only (runs on the system python, not in the Home Assistant venv).

What it does, in order: writes a fresh Home Assistant configuration (MQTT via a config entry, recorder on
SQLite), starts Home Assistant and the dashboard, plays a scenario with real `groupsync bridge`
participants (value kinds changing under one key, objects turning into arrays, restarts of Home Assistant
and of the dashboard, a session ending, a second session of the same activity, a clean exit and a
SIGKILL, then a few short sessions full of changes), stops everything, then reads Home Assistant's log,
entity registry and recorder database.

Each step waits, each time with a deadline, for: the dashboard's retained flat topic showing the step's
effect (read with mosquitto_sub); Home Assistant's MQTT client having subscribed to every topic named in
the dashboard's current discovery configs (the broker logs subscriptions; Home Assistant subscribes to a
newly discovered entity's topics only after a cooldown, and gets their retained values then); and Home
Assistant having processed everything published up to then. For the last the check owns one extra MQTT
sensor, the *marker*: it publishes a new retained marker value and waits until the recorder database
holds it. The broker forwards messages to Home Assistant in the order it received them (retained values
at subscription time), and Home Assistant records state changes in order, so once the marker is
recorded, the states caused by everything before it are recorded too.

Exit status: 0 when Home Assistant logged no relevant WARNING or ERROR, 1 when it did, 2 when the scenario
itself failed (a deadline passed, a process died), 130 when interrupted (SIGINT or SIGTERM); the log is
checked and reported in every case.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

GROUP = "ha"
ACTIVITY = "com.example.player"
MARKER_ENTITY = "sensor.groupsync_check_marker"
MARKER_STATE_TOPIC = "groupsync-check/marker"
MARKER_CONFIG_TOPIC = "homeassistant/sensor/groupsync_check/marker/config"
HASS_CLIENT_ID = "groupsync-check-homeassistant"
FLAT = f"groupsync/dashboard/{GROUP}"
SHORT_SESSIONS = 3

# Home Assistant log lines that are not about GroupSync's payloads, with the reason for each. Everything
# else at WARNING or above counts.
IGNORED_LOG_LINES = [
    # The issue pins Home Assistant 2024.3.3 on Python 3.11, which that release already calls deprecated.
    (r"\[homeassistant\.bootstrap\] Support for the running Python version 3\.11",
     "Python 3.11 is the pinned interpreter; 2024.3 announces its deprecation on every start"),
]


def log(message):
    print(f"[ha-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


class ScenarioError(Exception):
    pass


def wait_for(condition, timeout, what, lock=None):
    """Returns condition()'s first truthy value; raises ScenarioError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if lock is not None:
            with lock:
                value = condition()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ScenarioError(f"timed out after {timeout}s waiting for {what}")
                lock.wait(min(remaining, 0.5))
        else:
            value = condition()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise ScenarioError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)


class Monitor:
    """A mosquitto_sub on Home Assistant's and the dashboard's topics: the retained picture and a history."""

    def __init__(self, port, path):
        self.cond = threading.Condition()
        self.retained = {}
        self.history = []  # (time, topic, payload); payload "" for an empty (clearing) message
        self.births = 0
        self.file = open(path, "w")
        self.process = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-F", "%l %t %p",
             "-t", "homeassistant/#", "-t", f"{FLAT}/#", "-t", MARKER_STATE_TOPIC],
            stdout=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.file.write(line)
            self.file.flush()
            length, _, rest = line.rstrip("\n").partition(" ")
            topic, _, payload = rest.partition(" ")
            if length == "0":
                payload = ""
            with self.cond:
                self.history.append((time.time(), topic, payload))
                if payload:
                    self.retained[topic] = payload
                else:
                    self.retained.pop(topic, None)
                if topic == "homeassistant/status" and payload == "online":
                    self.births += 1
                self.cond.notify_all()

    def wait(self, condition, timeout, what):
        return wait_for(condition, timeout, what, lock=self.cond)

    def flat(self, suffix):
        return self.retained.get(f"{FLAT}/{suffix}")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.file.close()


class BrokerLog:
    """mosquitto's log (log_type subscribe and unsubscribe): which filters a client holds."""

    def __init__(self, path):
        self.path = path

    def offset(self):
        return os.path.getsize(self.path)

    def subscriptions(self, client_id, since):
        """The filters client_id subscribed to after byte offset since, and has not unsubscribed from."""
        held = set()
        with open(self.path, errors="replace") as file:
            file.seek(since)
            for line in file:
                fields = line.split()
                if len(fields) == 4 and fields[1] == client_id and fields[2].isdigit():
                    held.add(fields[3])  # "<time>: <client> <qos> <filter>"
                elif len(fields) == 3 and fields[1] == client_id:
                    held.discard(fields[2])  # "<time>: <client> <filter>"
        return held


class Bridge:
    """One `groupsync bridge` participant."""

    def __init__(self, binary, broker, name, workdir):
        self.name = name
        self.stderr = open(os.path.join(workdir, f"bridge-{name}.stderr"), "a")
        self.process = subprocess.Popen(
            [binary, "bridge", "--broker", broker, "--group", GROUP, "--as", name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1)
        self.cond = threading.Condition()
        self.events = []
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.cond:
                self.events.append(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def request(self, op, timeout=30, **fields):
        request_id = self.next_id
        self.next_id += 1
        self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
        self.process.stdin.flush()

        def answer():
            for event in self.events:
                if event.get("id") == request_id:
                    return event
            if self.process.poll() is not None:
                raise ScenarioError(f"bridge {self.name} exited with {self.process.returncode}")
            return None

        event = wait_for(answer, timeout, f"{self.name}'s answer to {op}", lock=self.cond)
        if event["event"] != "ok":
            raise ScenarioError(f"{self.name}: {op} failed: {event.get('message')}")
        return event

    def exit_cleanly(self):
        self.process.stdin.close()
        code = self.process.wait(timeout=30)
        if code != 0:
            raise ScenarioError(f"bridge {self.name} exited with {code}")

    def kill(self):
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.stderr.close()


class Hass:
    """The Home Assistant process, restartable; each run's home-assistant.log is kept (HA rotates it)."""

    def __init__(self, binary, config, workdir, monitor, broker_log):
        self.binary, self.config, self.workdir, self.monitor = binary, config, workdir, monitor
        self.broker_log = broker_log
        self.process = None
        self.runs = 0
        self.logs = []
        self.broker_log_offset = 0

    def subscriptions(self):
        return self.broker_log.subscriptions(HASS_CLIENT_ID, self.broker_log_offset)

    def start(self):
        self.runs += 1
        births = self.monitor.births
        self.broker_log_offset = self.broker_log.offset()
        output = open(os.path.join(self.workdir, f"hass-run{self.runs}.out"), "w")
        self.process = subprocess.Popen([self.binary, "-c", self.config], stdout=output,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        output.close()
        with open(os.path.join(self.workdir, "hass.pid"), "w") as pid_file:
            pid_file.write(str(self.process.pid))

        def born():
            if self.process.poll() is not None:
                raise ScenarioError(f"Home Assistant exited with {self.process.returncode} while starting")
            return self.monitor.births > births

        started = time.monotonic()
        self.monitor.wait(born, 300, "Home Assistant's MQTT birth message")
        log(f"Home Assistant run {self.runs} is connected to the broker ({time.monotonic() - started:.1f}s)")

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log("Home Assistant did not stop within 30s of SIGTERM: killing it")
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.returncode not in (0, -signal.SIGTERM):
            log(f"Home Assistant run {self.runs} exited with {self.process.returncode}")
        self.process = None
        os.remove(os.path.join(self.workdir, "hass.pid"))
        kept = os.path.join(self.workdir, f"home-assistant.run{self.runs}.log")
        shutil.copyfile(os.path.join(self.config, "home-assistant.log"), kept)
        self.logs.append(kept)


class Dashboard:
    def __init__(self, binary, broker, workdir, monitor):
        self.binary, self.broker, self.workdir, self.monitor = binary, broker, workdir, monitor
        self.process = None
        self.runs = 0

    def start(self):
        self.runs += 1
        output = open(os.path.join(self.workdir, f"dashboard-run{self.runs}.out"), "w")
        self.process = subprocess.Popen(
            [self.binary, "dashboard", "--broker", self.broker, "--group", GROUP, "--verbose"],
            stdout=output, stderr=subprocess.STDOUT)
        output.close()
        with open(os.path.join(self.workdir, "dashboard.pid"), "w") as pid_file:
            pid_file.write(str(self.process.pid))
        self.monitor.wait(lambda: self.monitor.flat("availability") == "online"
                          and self.monitor.flat("sessions") is not None,
                          30, "the dashboard's availability and sessions topics")

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None
        os.remove(os.path.join(self.workdir, "dashboard.pid"))


class Recorder:
    """Read-only queries on Home Assistant's recorder database."""

    def __init__(self, path):
        self.path = path

    def query(self, sql, *parameters):
        if not os.path.exists(self.path):
            return []
        connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        try:
            return connection.execute(sql, parameters).fetchall()
        except sqlite3.OperationalError:
            return []  # the recorder has not created its schema yet
        finally:
            connection.close()

    def latest_state(self, entity_id):
        rows = self.query("SELECT s.state FROM states s JOIN states_meta m ON s.metadata_id = m.metadata_id "
                          "WHERE m.entity_id = ? ORDER BY s.state_id DESC LIMIT 1", entity_id)
        return rows[0][0] if rows else None

    def history(self):
        """Every recorded state: (time, entity_id, state, attributes)."""
        rows = self.query(
            "SELECT s.last_updated_ts, m.entity_id, s.state, a.shared_attrs FROM states s "
            "JOIN states_meta m ON s.metadata_id = m.metadata_id "
            "LEFT JOIN state_attributes a ON s.attributes_id = a.attributes_id ORDER BY s.state_id")
        return [(ts, entity, state, json.loads(attrs) if attrs else {}) for ts, entity, state, attrs in rows]


def mosquitto_pub(port, topic, payload, retain=False):
    command = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", topic, "-m", payload]
    if retain:
        command.append("-r")
    subprocess.run(command, check=True, timeout=10)


def write_config(config, broker_port, http_port):
    """A minimal Home Assistant configuration, and the MQTT integration as a config entry.

    Home Assistant 2024.3 takes the broker only from a config entry (`mqtt:` in YAML holds entities);
    the entry below is what the MQTT config flow stores (ConfigEntry.as_dict in
    homeassistant/config_entries.py; data keys from components/mqtt/config_flow.py), in the storage
    envelope of homeassistant/helpers/storage.py. Discovery is on and the birth message is the default
    (`online` on homeassistant/status). The fixed client ID lets the check find Home Assistant's
    subscriptions in the broker's log.
    """
    os.makedirs(os.path.join(config, ".storage"))
    with open(os.path.join(config, "configuration.yaml"), "w") as file:
        file.write(f"""homeassistant:
  name: GroupSync check
  latitude: 0
  longitude: 0
  elevation: 0
  unit_system: metric
  time_zone: UTC
  country: DE
  currency: EUR
http:
  server_host: 127.0.0.1
  server_port: {http_port}
mqtt:
recorder:
  commit_interval: 0
logger:
  default: warning
""")
    entry = {
        "entry_id": "groupsynccheckmqttentry00000001",
        "version": 1,
        "minor_version": 1,
        "domain": "mqtt",
        "title": "127.0.0.1",
        "data": {"broker": "127.0.0.1", "port": broker_port, "discovery": True, "client_id": HASS_CLIENT_ID},
        "options": {},
        "pref_disable_new_entities": False,
        "pref_disable_polling": False,
        "source": "user",
        "unique_id": None,
        "disabled_by": None,
    }
    storage = {"version": 1, "minor_version": 1, "key": "core.config_entries", "data": {"entries": [entry]}}
    with open(os.path.join(config, ".storage", "core.config_entries"), "w") as file:
        json.dump(storage, file)


class Check:
    def __init__(self, args):
        self.args = args
        self.workdir = args.workdir
        self.config = os.path.join(self.workdir, "config")
        self.broker = f"mqtt://127.0.0.1:{args.broker_port}"
        self.monitor = None
        self.hass = None
        self.dashboard = None
        self.bridges = []
        self.recorder = Recorder(os.path.join(self.config, "home-assistant_v2.db"))
        self.marker_count = 0
        self.sessions = []  # {"id", "start", "end"}: times bound the discovery configs published for it
        self.notes = []  # what Home Assistant did not do in time, for the report

    # Synchronisation

    def sync(self, step):
        """Waits until Home Assistant has processed every message published before this call."""
        self.wait_subscribed(step)
        self.marker_count += 1
        value = f"{self.marker_count}-{step}"[:250]
        mosquitto_pub(self.args.broker_port, MARKER_STATE_TOPIC, value, retain=True)
        wait_for(lambda: self.recorder.latest_state(MARKER_ENTITY) == value, 60,
                 f"Home Assistant to record the marker {value!r}")

    def wait_subscribed(self, step):
        """Waits until Home Assistant holds a subscription to every topic of the current discovery configs.

        A config Home Assistant rejects never gets its topics subscribed: after the deadline the check goes
        on and notes which topics were missing (Home Assistant's log says why).
        """
        with self.monitor.cond:
            configs = [payload for topic, payload in self.monitor.retained.items()
                       if topic.startswith("homeassistant/") and topic.endswith("/config")]
        wanted = set()
        for payload in configs:
            try:
                config = json.loads(payload)
            except ValueError:
                continue
            if isinstance(config, dict):
                wanted.update(config[field] for field in ("state_topic", "json_attributes_topic",
                                                          "availability_topic") if field in config)
        try:
            wait_for(lambda: wanted <= self.hass.subscriptions(), 15,
                     "Home Assistant to subscribe to the discovered topics")
        except ScenarioError:
            missing = sorted(wanted - self.hass.subscriptions())
            self.notes.append(f"at step {step!r}, Home Assistant had not subscribed to: {', '.join(missing)}")
            log(self.notes[-1])

    def wait_flat(self, suffix, check, what):
        return self.monitor.wait(lambda: check(self.monitor.flat(suffix)), 30, what)

    def wait_value(self, session, key, value):
        def shows(payload):
            return payload is not None and json.loads(payload) == value
        self.wait_flat(f"session/{session}/state/{key}", shows, f"the dashboard to show {key} = {value!r}")

    def wait_participants(self, session, count):
        self.wait_flat(f"session/{session}/participants", lambda payload: payload == str(count),
                       f"the dashboard to show {count} participants")

    def set(self, bridge, session, key, value):
        bridge.request("set", key=key, value=value)
        self.wait_value(session, key, value)
        self.sync(f"{key}={json.dumps(value)}")

    def start_session(self, starter, joiner):
        """The starter starts a session of ACTIVITY, the joiner joins it; returns its ID."""
        started = time.time()
        session = starter.request("start", activity=ACTIVITY, title="Player check")["session"]
        self.sessions.append({"id": session, "start": started, "end": None})
        joiner.request("join", session=session)
        self.wait_participants(session, 2)
        self.sync(f"session {len(self.sessions)} started")
        return session

    def end(self, bridge, session, number):
        bridge.request("end")
        self.monitor.wait(lambda: not any(topic.startswith(f"{FLAT}/session/{session}/")
                                          for topic in self.monitor.retained),
                          30, "the dashboard to clear the session's flat topics")
        self.sync(f"session {number} ended")
        self.sessions[number - 1]["end"] = time.time()

    def burst(self, bridge, session, key, values):
        """Sets the values one right after the other, then waits for the last as set() does."""
        for value in values:
            bridge.request("set", key=key, value=value)
        self.wait_value(session, key, values[-1])
        self.sync(f"{key} burst")

    # Scenario

    def run(self):
        write_config(self.config, self.args.broker_port, self.args.http_port)
        self.monitor = Monitor(self.args.broker_port, os.path.join(self.workdir, "mqtt.txt"))
        self.hass = Hass(self.args.hass, self.config, self.workdir, self.monitor, BrokerLog(self.args.broker_log))
        self.dashboard = Dashboard(self.args.groupsync, self.broker, self.workdir, self.monitor)

        self.hass.start()
        mosquitto_pub(self.args.broker_port, MARKER_CONFIG_TOPIC, json.dumps({
            "name": "GroupSync check marker", "object_id": "groupsync_check_marker",
            "unique_id": "groupsync_check_marker", "state_topic": MARKER_STATE_TOPIC}), retain=True)
        self.sync("home assistant up")

        self.dashboard.start()
        self.sync("dashboard up")

        log("session 1: alice starts, bob joins")
        alice = self.bridge("alice")
        bob = self.bridge("bob")
        first = self.start_session(alice, bob)

        log("volume: numbers, a string, null, a number again")
        for value in (3, 4.5, "loud", None, 6):
            self.set(alice, first, "volume", value)
        log("info: an object, an array, an object again")
        for value in ({"a": 1, "b": "x"}, [1, 2], {"a": 2, "b": "y"}):
            self.set(bob, first, "info", value)
        log("title: a string")
        self.set(alice, first, "title", "Morning mix")
        log("bursts: kinds change faster than Home Assistant re-subscribes")
        self.burst(alice, first, "volume", (9, "quiet", {"level": 10}, [10], 11))
        self.burst(bob, first, "info", ({"a": 3}, [3, 4], {"a": 4}, [5], "x", {"a": 5}))

        log("Home Assistant restarts during the session")
        self.hass.stop()
        self.hass.start()
        self.sync("home assistant restarted")
        self.set(bob, first, "volume", 7)

        log("the dashboard restarts during the session")
        self.dashboard.stop()
        self.sync("dashboard stopped")
        self.dashboard.start()
        self.sync("dashboard restarted")
        self.set(alice, first, "volume", 8)

        log("session 1 ends")
        self.end(alice, first, 1)

        log("session 2 of the same activity: alice starts, bob joins")
        second = self.start_session(alice, bob)
        self.set(alice, second, "volume", 5)
        self.set(bob, second, "info", {"a": 1, "b": "x"})
        self.set(alice, second, "title", "Evening mix")

        log("bob exits cleanly, alice is killed with SIGKILL")
        bob.exit_cleanly()
        self.wait_participants(second, 1)
        self.sync("bob left")
        alice.kill()
        self.wait_participants(second, 0)
        self.sync("alice killed")

        log("carol joins the empty session 2 and ends it")
        carol = self.bridge("carol")
        carol.request("join", session=second)
        self.wait_participants(second, 1)
        self.sync("carol joined")
        self.end(carol, second, 2)

        # Home Assistant's reactions to a kind change and to a session's end depend on timing: a few
        # short sessions give each race more chances to show.
        dave = self.bridge("dave")
        for _ in range(SHORT_SESSIONS):
            log(f"short session {len(self.sessions) + 1}: carol starts, dave joins, bursts, carol ends it")
            session = self.start_session(carol, dave)
            self.burst(carol, session, "volume", (1, "soft", None, 2.5, [2], {"level": 3}, 4))
            self.burst(dave, session, "info", ({"a": 1}, [1], {"a": 2}, None, {"a": 3}))
            self.end(carol, session, len(self.sessions))
        carol.exit_cleanly()
        dave.exit_cleanly()

        log("the dashboard and Home Assistant stop")
        self.dashboard.stop()
        self.sync("dashboard stopped at the end")

    def bridge(self, name):
        bridge = Bridge(self.args.groupsync, self.broker, name, self.workdir)
        self.bridges.append(bridge)
        return bridge

    def stop_everything(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the stopping short
        for bridge in self.bridges:
            bridge.stop()
        for stop in (self.dashboard and self.dashboard.stop, self.hass and self.hass.stop):
            if stop:
                try:
                    stop()
                except Exception as error:  # report, and go on stopping the rest
                    log(f"while stopping: {error}")
        if self.monitor:
            self.monitor.stop()

    # Report

    def relevant_log_lines(self):
        """WARNING/ERROR/CRITICAL records of every Home Assistant run, with their continuation lines."""
        record = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ (\w+) ")
        found, ignored = [], []
        for path in self.hass.logs if self.hass else []:
            current = None
            with open(path, errors="replace") as file:
                for line in file:
                    line = line.rstrip("\n")
                    match = record.match(line)
                    if match:
                        current = None
                        if match.group(1) in ("WARNING", "ERROR", "CRITICAL"):
                            current = [f"{os.path.basename(path)}: {line}"]
                            if any(re.search(pattern, line) for pattern, _ in IGNORED_LOG_LINES):
                                ignored.append(current)
                            else:
                                found.append(current)
                    elif current is not None:
                        current.append(line)
        return found, ignored

    def report(self):
        found, ignored = self.relevant_log_lines()
        print()
        print("=== Home Assistant WARNING/ERROR records about GroupSync's payloads ===")
        for record in found:
            print("\n".join(record))
        print(f"--- {len(found)} record(s); {len(ignored)} ignored as unrelated (IGNORED_LOG_LINES)")
        distinct = {}
        for record in found:
            message = re.sub(r"^\S+: \S+ \S+ ", "", record[0])
            cause = [line for line in record[1:] if line.strip() and not line.startswith(" ")]
            if cause:  # a traceback: its last line says what went wrong
                message += " … " + cause[-1]
            distinct[message] = distinct.get(message, 0) + 1
        if distinct:
            print("--- distinct messages:")
            for message, count in sorted(distinct.items(), key=lambda item: -item[1]):
                print(f"{count:4} × {message[:400]}")

        registry = self.entity_registry()
        print()
        print("=== Entities (from the entity registry, deleted entities included) ===")
        per_session = [self.session_entities(session, registry) for session in self.sessions]
        for number, (session, entities) in enumerate(zip(self.sessions, per_session), start=1):
            print(f"session {number} ({session['id']}):")
            for unique_id, entity_id in entities:
                print(f"  {entity_id}  [unique_id {unique_id}]")
        in_sessions = {unique_id for entities in per_session for unique_id, _ in entities}
        print("not tied to a session:")
        for unique_id, entry in sorted(registry.items()):
            if unique_id not in in_sessions and unique_id != "groupsync_check_marker":
                print(f"  {entry['entity_id']}  [unique_id {unique_id}]")
        for number, entities in enumerate(per_session[1:], start=2):  # all of the same group and activity
            same = [e for _, e in entities] == [e for _, e in per_session[0]]
            print(f"entity IDs of session {number} {'are the same as' if same else 'differ from'} session 1's")
        connectivity = sorted(entry["entity_id"] for entry in registry.values()
                              if entry["entity_id"].startswith("binary_sensor.")
                              and "connectivity" in (entry.get("device_class"), entry.get("original_device_class")))
        print(f"binary_sensor entities with device_class connectivity: {', '.join(connectivity) or 'none'}")
        for note in self.notes:
            print(f"note: {note}")
        self.report_removal(per_session)
        self.report_states(registry)
        return found

    def entity_registry(self):
        """unique_id → registry entry of every MQTT entity, deleted ones included (read after the last stop)."""
        path = os.path.join(self.config, ".storage", "core.entity_registry")
        if not os.path.exists(path):
            return {}
        with open(path) as file:
            data = json.load(file)["data"]
        entries = {}
        for entry in data.get("deleted_entities", []) + data.get("entities", []):
            if entry.get("platform") == "mqtt":
                entries[entry["unique_id"]] = entry
        return entries

    def session_entities(self, session, registry):
        """(unique_id, entity_id) of the entities the dashboard configured for a session, sorted by entity_id.

        Those whose discovery config was published while the session was live and names the session or
        its activity (the group's own entities are republished then too, but name neither).
        """
        end = session["end"] or float("inf")
        unique_ids = set()
        for when, topic, payload in self.monitor.history if self.monitor else []:
            if (session["start"] <= when <= end and topic.startswith("homeassistant/") and topic.endswith("/config")
                    and (session["id"] in payload or ACTIVITY in payload)):
                try:
                    unique_ids.add(json.loads(payload)["unique_id"])
                except (ValueError, KeyError, TypeError):
                    continue
        entities = [(u, registry.get(u, {}).get("entity_id", "(not in the registry)")) for u in unique_ids]
        return sorted(entities, key=lambda entity: entity[1])

    def report_removal(self, per_session):
        """Whether each entity of an ended session was removed from Home Assistant when it ended."""
        history = self.recorder.history()
        for number, (session, entities) in enumerate(zip(self.sessions, per_session), start=1):
            if session["end"] is None:
                continue
            print(f"after session {number} ended:")
            for _, entity_id in entities:
                states = [state for when, entity, state, _ in history
                          if entity == entity_id and when <= session["end"]]
                removed = bool(states) and states[-1] in ("", None)  # a removed entity's row has no state
                print(f"  {entity_id}: {'removed' if removed else f'NOT removed (last state {states[-1:]})'}")

    def report_states(self, registry):
        """Every GroupSync entity's recorded states, with the state_class each had."""
        wanted = {entry["entity_id"] for unique_id, entry in registry.items() if unique_id != "groupsync_check_marker"}
        print()
        print("=== Recorded states (state [state_class]; None = removed) ===")
        per_entity = {}
        for _, entity, state, attributes in self.recorder.history():
            if entity in wanted:
                per_entity.setdefault(entity, []).append(f"{state!r} [{attributes.get('state_class', '-')}]")
        for entity in sorted(per_entity):
            print(f"{entity}:")
            print("  " + ", ".join(per_entity[entity]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groupsync", required=True)
    parser.add_argument("--hass", required=True)
    parser.add_argument("--broker-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--broker-log", required=True, help="mosquitto's log file, with subscriptions")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)

    check = Check(args)
    status = None
    try:
        check.run()
    except (ScenarioError, subprocess.SubprocessError, OSError) as error:
        status = 2
        log(f"SCENARIO FAILED: {error}")
    except KeyboardInterrupt:
        status = 130
        log("interrupted: stopping, then reporting what happened so far")
    finally:
        check.stop_everything()
    found = check.report()
    if status is not None:
        return status
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
