#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A stranger that floods a crypt process's listeners: no job secret.

    flooder.py HOST PORTS PCAP SECONDS [HOLD]

For SECONDS (or until SIGINT), against every port of PORTS (comma separated, or @FILE: the
ports in FILE, read again every half second, so that a listener that opens
during the flood is flooded too) at once:
  - holds HOLD connections open in all (1000 by default), silent, and opens
    another for each one the victim closes;
  - opens fresh connections and sends 144 bytes of garbage on each;
  - opens fresh connections and sends the first message an honest client
    sent to that port (taken from PCAP, a capture of an earlier honest run),
    byte for byte: a replayed handshake initiation.
It prints, per port, what it did and what the victim did: how many held
connections the victim closed, how many replays it answered with a
handshake response (it did the handshake's DH), with a cookie reply, with
a refusal word (a crypt connection manager says why it closes), or
closed. The verdict is the caller's.
"""
import os
import resource
import selectors
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attacker import first_bytes_to, pcap_payloads  # noqa: E402

FRESH_IN_FLIGHT = 64   # garbage and replay connections open at a time, per port


class Port:
    def __init__(self, port, replay):
        self.port = port
        self.replay = replay
        self.held = set()
        self.counts = dict(held_closed=0, connect_failed=0, garbage=0,
                           replays=0, replays_answered=0, replays_cookie=0,
                           replays_refused_word=0, replays_closed=0)


FIRST_ERROR = []


def note_error(e):
    if not FIRST_ERROR:
        FIRST_ERROR.append(str(e))


def connect(host, port):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        note_error(e)
        return None
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    except OSError as e:
        note_error(e)
        s.close()
        return None
    return s


def main():
    host, ports, pcap, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    hold = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hold + 4 * FRESH_IN_FLIGHT * 8 + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    def read_ports():
        text = open(ports[1:]).read() if ports.startswith("@") else ports
        return [int(p) for p in text.replace("\n", ",").split(",") if p.strip()]

    payloads = pcap_payloads(pcap)
    targets = []

    def add_targets():
        known = {t.port for t in targets}
        new = [p for p in read_ports() if p not in known]
        replays = first_bytes_to(payloads, new)
        for p in new:
            targets.append(Port(p, replays.get(p)))
            print(f"flooder: {host} port {p}, replaying " +
                  (f"{len(replays[p])} bytes" if p in replays else "nothing"))
        sys.stdout.flush()

    add_targets()
    print(f"flooder: holding {hold} in all, {seconds:.0f} s")
    sel = selectors.DefaultSelector()
    fresh = {}  # socket -> (target, kind, sent)
    if not targets:
        sys.exit("flooder: no port to flood")
    end = time.monotonic() + seconds
    next_read = time.monotonic() + 0.5

    def open_fresh(t, kind):
        s = connect(host, t.port)
        if s is None:
            t.counts["connect_failed"] += 1
            return
        fresh[s] = [t, kind, False]
        sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ, ("fresh", t))

    stop = []  # SIGINT: the caller's honest runs are done
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while time.monotonic() < end and not stop:
        if ports.startswith("@") and time.monotonic() > next_read:
            next_read = time.monotonic() + 0.5
            add_targets()
        per_port_hold = max(1, hold // len(targets))
        for t in targets:
            opened = 0
            while len(t.held) < per_port_hold and opened < 100:
                opened += 1
                s = connect(host, t.port)
                if s is None:
                    t.counts["connect_failed"] += 1
                    break
                t.held.add(s)
                sel.register(s, selectors.EVENT_READ, ("held", t))
            in_flight = sum(1 for v in fresh.values() if v[0] is t)
            for _ in range(FRESH_IN_FLIGHT - in_flight):
                open_fresh(t, "replay" if (t.replay and (t.counts["garbage"] >
                                                         t.counts["replays"])) else "garbage")
        for key, events in sel.select(timeout=0.05):
            s = key.fileobj
            role, t = key.data
            if role == "held":
                # a silent connection the victim closed (or reset)
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except ConnectionRefusedError as e:
                    note_error(e)
                    t.counts["connect_failed"] += 1
                    data = None
                except OSError:
                    data = b""
                if data:
                    continue
                if data is not None:
                    t.counts["held_closed"] += 1
                t.held.discard(s)
                sel.unregister(s)
                s.close()
                continue
            entry = fresh[s]
            kind = entry[1]
            if not entry[2] and (events & selectors.EVENT_WRITE):
                try:
                    s.send(t.replay if kind == "replay" else os.urandom(144))
                    t.counts["replays" if kind == "replay" else "garbage"] += 1
                except OSError as e:
                    note_error(e)
                    t.counts["connect_failed"] += 1
                    sel.unregister(s)
                    del fresh[s]
                    s.close()
                    continue
                entry[2] = True
                sel.modify(s, selectors.EVENT_READ, key.data)
                if kind == "garbage":
                    sel.unregister(s)
                    del fresh[s]
                    s.close()
                continue
            if events & selectors.EVENT_READ:
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if kind == "replay":
                    # a handshake response (types 2 and 4: the victim did
                    # the DH), a cookie reply (5), a refusal word (6:
                    # src/keyex/noise.h), or nothing
                    first = data[0] if data else None
                    t.counts["replays_answered" if first in (2, 4) else
                             "replays_cookie" if first == 5 else
                             "replays_refused_word" if first == 6 else
                             "replays_closed"] += 1
                sel.unregister(s)
                del fresh[s]
                s.close()

    for t in targets:
        c = t.counts
        print(f"flooder port {t.port}: held {len(t.held)} at the end, "
              f"{c['held_closed']} held ones closed by the victim, "
              f"{c['garbage']} garbage, {c['replays']} replays "
              f"({c['replays_answered']} answered by a handshake response, "
              f"{c['replays_cookie']} by a cookie, {c['replays_refused_word']} by a "
              f"refusal word, {c['replays_closed']} closed), "
              f"{c['connect_failed']} connections failed")
    total = sum(t.counts["garbage"] + t.counts["replays"] + t.counts["held_closed"]
                for t in targets)
    print(f"flooder total stranger connections: {total}" +
          (f" (first failure: {FIRST_ERROR[0]})" if FIRST_ERROR else ""))


if __name__ == "__main__":
    main()
