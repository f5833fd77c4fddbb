#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""An on-path relay: forwards one TCP connection and tampers with it.

    relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT MODE AFTER

Forwards the first connection it accepts to TARGET, both ways. Once AFTER
bytes went from the client to the target (past the 144-byte handshake
initiation and a few records), MODE applies to that direction once:
  flip       one bit of the next chunk
  truncate   the rest is never sent; both sides are closed
  drop       the next chunk is not sent (the stream goes on after it)
  duplicate  the next chunk is sent twice
  reorder    the two halves of the next chunk are sent in the opposite
             order (a chunk, not two: a ping-pong may send nothing more)
  inject     64 random bytes go in before the next chunk
  cut_record one whole RECORD frame of crypt's wire is cut out, at frame
             boundaries (a ping-pong sends nothing after it: only the
             wire's authenticated heartbeat count can tell)
Prints what it did. The verdict is the caller's: the target must fail the
connection with a reason, nothing corrupted may be delivered, and neither
side may hang without saying why.
"""
import os
import select
import socket
import struct
import sys

HANDSHAKE = 144   # the initiation (src/keyex/noise.h)
FRAME_HDR = 8     # crypt_wire_frame_hdr_t (base/format.h)


def main():
    lhost, lport, thost, tport, mode, after = sys.argv[1:7]
    after = int(after)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lhost, int(lport)))
    srv.listen(1)
    print("relay: listening", flush=True)
    cli, _ = srv.accept()
    tgt = socket.create_connection((thost, int(tport)))
    for s in (cli, tgt):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    forwarded, done, pending = 0, False, b""
    while True:
        r, _, _ = select.select([cli, tgt], [], [], 30)
        if not r:
            break
        if tgt in r:
            data = tgt.recv(65536)
            if not data:
                break
            cli.sendall(data)
        if cli in r:
            data = cli.recv(65536)
            if not data:
                break
            if mode == "cut_record":
                pending += data
                while True:
                    if forwarded < HANDSHAKE:
                        n = min(HANDSHAKE - forwarded, len(pending))
                        frame, drop = pending[:n], False
                    elif len(pending) >= FRAME_HDR:
                        length, ftype = struct.unpack("<IB", pending[:5])
                        if len(pending) < FRAME_HDR + length:
                            break
                        frame = pending[:FRAME_HDR + length]
                        drop = not done and forwarded >= after and ftype == 1
                    else:
                        break
                    if not frame:
                        break
                    pending = pending[len(frame):]
                    if drop:
                        done = True
                        print(f"relay: {mode} after {forwarded} bytes, frame of "
                              f"{len(frame)}", flush=True)
                    else:
                        tgt.sendall(frame)
                    forwarded += len(frame)
                continue
            if done or forwarded + len(data) <= after:
                tgt.sendall(data)
                forwarded += len(data)
                continue
            done = True
            print(f"relay: {mode} after {forwarded} bytes, chunk of {len(data)}",
                  flush=True)
            if mode == "flip":
                i = len(data) // 2
                tgt.sendall(data[:i] + bytes([data[i] ^ 0x04]) + data[i + 1:])
            elif mode == "truncate":
                break
            elif mode == "drop":
                pass
            elif mode == "duplicate":
                tgt.sendall(data + data)
            elif mode == "reorder":
                i = len(data) // 2
                tgt.sendall(data[i:] + data[:i])
            elif mode == "inject":
                tgt.sendall(os.urandom(64) + data)
            forwarded += len(data)
    for s in (cli, tgt):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
    print("relay: closed", flush=True)


if __name__ == "__main__":
    main()
