#!/usr/bin/env python3
"""A stand-in for cairnd on a Unix socket, for test_security.py: what a
local attacker (or a broken daemon) would serve in cairnd's place.

    fakecairnd.py SOCKET LOG [CONTENT_FILE]

Listens on SOCKET (made 0777, so any uid may connect), and appends to LOG a
line per connection ("connect") and per frame received ("frame OP"), so a
test can tell whether a client ever sent it anything. It answers `get`
with the bytes of CONTENT_FILE (whatever the ref, in frames of 256 KiB,
claiming the ref as its hash) and any other op with ok. It runs until
killed.
"""
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402


def log(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def read_exact(conn, n):
    buf = b""
    while len(buf) < n:
        got = conn.recv(n - len(buf))
        if not got:
            return None
        buf += got
    return buf


def serve(conn, log_path, content):
    while True:
        head = read_exact(conn, 4)
        if head is None:
            return
        body = read_exact(conn, struct.unpack(">I", head)[0])
        if body is None:
            return
        req = ct.unpackb(body)
        op = req.get("op", "?")
        log(log_path, "frame %s" % op)
        rid = req.get("id", 0)
        if op == "get" and content is not None:
            pieces = [content[i:i + ct.MAX_DATA] for i in range(0, len(content), ct.MAX_DATA)]
            pieces = pieces or [b""]
            for i, piece in enumerate(pieces):
                reply = {"id": rid, "ok": True, "data": piece, "more": i + 1 < len(pieces)}
                if i == 0:
                    reply.update(hash=req.get("ref", ""), name="x", size=len(content),
                                 mime="text/plain")
                conn.sendall(ct.frame(reply))
        elif op == "hello":
            conn.sendall(ct.frame({"id": rid, "ok": True, "version": 1}))
        else:
            conn.sendall(ct.frame({"id": rid, "ok": True}))


def main():
    path, log_path = sys.argv[1], sys.argv[2]
    content = None
    if len(sys.argv) > 3:
        with open(sys.argv[3], "rb") as f:
            content = f.read()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(16)
    log(log_path, "listening")
    while True:
        conn, _ = srv.accept()
        log(log_path, "connect")
        try:
            serve(conn, log_path, content)
        except (OSError, ct.MsgpackError):
            pass
        conn.close()


if __name__ == "__main__":
    main()
