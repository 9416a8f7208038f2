#!/usr/bin/env python3
"""The wire protocol of proto/PROTOCOL.md, spoken over a raw Unix socket to a
real cairnd: hello negotiation, pipelining and id matching, streams both
ways, every operation's reply fields, list paging, field limits, and 1,000
simultaneous connections."""

import hashlib
import os
import selectors
import stat
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

OPS = {"hello", "add", "get", "delete", "list", "stat", "status"}


class ProtocolTestCase(unittest.TestCase):
    def setUp(self):
        self.d = ct.Daemon(self)
        self.d.start()
        self.c = self.d.connect()
        self.addCleanup(self.c.close)

    def finish(self):
        """Every test ends by checking the daemon still serves and stops cleanly."""
        self.d.assert_healthy()
        self.c.close()
        self.d.stop()

    def assertOk(self, reply):
        self.assertIs(reply.get("ok"), True, "request failed: %r" % (ct.short(reply),))
        return reply

    def assertError(self, reply, *codes):
        self.assertIs(reply.get("ok"), False, "expected an error %s, got %r" % (codes, ct.short(reply)))
        self.assertIsInstance(reply.get("error"), dict)
        self.assertIn(reply["error"].get("code"), codes, ct.short(reply))
        self.assertIsInstance(reply["error"].get("message", ""), str)


class Transport(ProtocolTestCase):
    def test_socket_and_directory_modes(self):
        sock_mode = stat.S_IMODE(os.stat(self.d.socket_path).st_mode)
        dir_mode = stat.S_IMODE(os.stat(os.path.dirname(self.d.socket_path)).st_mode)
        self.assertTrue(stat.S_ISSOCK(os.stat(self.d.socket_path).st_mode))
        self.assertEqual(sock_mode, 0o600, oct(sock_mode))
        self.assertEqual(dir_mode, 0o700, oct(dir_mode))
        self.finish()

    def test_an_existing_socket_directory_keeps_its_mode(self):
        # Like /tmp: a directory that was there is not cairnd's to change.
        base = ct.make_tempdir(self)
        shared = os.path.join(base, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        d = ct.Daemon(self, socket_path=os.path.join(shared, "cairnd.sock")).start()
        self.assertEqual(stat.S_IMODE(os.stat(shared).st_mode), 0o1777)
        self.assertEqual(stat.S_IMODE(os.stat(d.socket_path).st_mode), 0o600)
        d.stop()
        self.finish()

    def test_requests_without_hello(self):
        r = self.assertOk(self.c.call("status"))
        self.assertEqual(r["protocol"], 1)
        self.finish()


class Hello(ProtocolTestCase):
    def test_hello_v1(self):
        r = self.assertOk(self.c.call("hello", versions=[1], client="cairntest"))
        self.assertEqual(r["version"], 1)
        self.assertIsInstance(r["server"], str)
        self.assertTrue(r["server"].startswith("cairnd/"), r["server"])
        self.assertEqual(r["max_frame"], ct.MAX_FRAME)
        self.assertEqual(r["max_data"], ct.MAX_DATA)
        self.assertTrue(OPS <= set(r["ops"]), r["ops"])
        # the connection goes on normally afterwards
        self.assertOk(self.c.call("status"))
        self.finish()

    def test_hello_picks_highest_common_version(self):
        r = self.assertOk(self.c.call("hello", versions=[99, 1, 7]))
        self.assertEqual(r["version"], 1)
        self.finish()

    def test_hello_unsupported_version(self):
        rid = self.c.send_request("hello", versions=[2, 3, 1000])
        r = self.c.recv_for(rid)
        self.assertEqual(r["id"], rid)
        self.assertError(r, "unsupported_version")
        with self.d.connect() as c2:
            self.assertError(c2.call("hello", versions=[]), "unsupported_version", "bad_request")
            self.assertError(c2.call("hello", versions="1"), "bad_request")
        self.finish()


class Ids(ProtocolTestCase):
    def test_zero_id_is_bad_request(self):
        self.c.send({"id": 0, "op": "status"})
        r = self.c.recv_frame()
        self.assertError(r, "bad_request")
        self.assertEqual(r["id"], 0)
        self.assertOk(self.c.call("status"))
        self.finish()

    def test_reused_in_flight_id_is_bad_request(self):
        # An add stream keeps id 7 in progress until its last data frame.
        self.c.send({"id": 7, "op": "add", "data": b"first half ", "more": True})
        self.c.send({"id": 7, "op": "status"})
        # answered with id 0 (a reply with id 7 would read as the add's), naming the id
        r = self.c.recv_for(0)
        self.assertError(r, "bad_request")
        self.assertIn("id 7 ", r["error"]["message"])
        # the add goes on undisturbed
        self.c.send({"id": 7, "op": "data", "data": b"second half", "more": False})
        r = self.c.recv_for(7)
        self.assertOk(r)
        self.assertEqual(r["hash"], hashlib.sha256(b"first half second half").hexdigest())
        # the connection keeps working
        self.assertOk(self.c.call("status"))
        self.finish()

    def test_ids_echoed(self):
        for rid in (1, 200, 70000, 2 ** 32 + 5, 2 ** 64 - 1):
            self.c.send({"id": rid, "op": "status"})
            r = self.c.recv_frame()
            self.assertEqual(r["id"], rid)
            self.assertOk(r)
        self.finish()


class Pipelining(ProtocolTestCase):
    def test_100_pipelined_requests_matched_by_id(self):
        docs = [os.urandom(100 + i) for i in range(5)]
        hashes = [self.assertOk(self.c.add(doc, name="p%d" % i))["hash"] for i, doc in enumerate(docs)]
        wire = bytearray()
        expect = {}
        for rid in range(1000, 1100):
            k = rid % 5
            kind = rid % 3
            if kind == 0:
                wire += ct.frame({"id": rid, "op": "get", "ref": hashes[k]})
            elif kind == 1:
                wire += ct.frame({"id": rid, "op": "stat", "ref": "p%d" % k})
            else:
                wire += ct.frame({"id": rid, "op": "status"})
            expect[rid] = (kind, k)
        self.c.send_raw(bytes(wire))  # all 100 before reading anything
        done = {}
        while len(done) < 100:
            r = self.c.recv_frame()
            self.assertIn(r["id"], expect, "reply for an id never sent: %r" % ct.short(r))
            self.assertNotIn(r["id"], done, "second final reply for id %d" % r["id"])
            self.assertOk(r)
            kind, k = expect[r["id"]]
            if kind == 0:
                self.assertEqual(r["data"], docs[k])
                self.assertEqual(r["hash"], hashes[k])
                self.assertFalse(r.get("more", False))
            elif kind == 1:
                self.assertEqual(r["hash"], hashes[k])
                self.assertEqual(r["size"], len(docs[k]))
            else:
                self.assertEqual(r["documents"], 5)
            done[r["id"]] = r
        self.finish()

    def test_interleaved_streams_reassemble(self):
        a = os.urandom(2 * ct.MiB + 17)
        b = os.urandom(3 * ct.MiB + 5)
        ha = self.assertOk(self.c.add(a))["hash"]
        hb = self.assertOk(self.c.add(b))["hash"]
        ida = self.c.send_request("get", ref=ha)
        idb = self.c.send_request("get", ref=hb)
        ids = self.c.send_request("status")
        parts = {ida: [], idb: []}
        finished = set()
        status_seen = False
        while len(finished) < 2 or not status_seen:
            r = self.c.recv_frame()
            self.assertOk(r)  # every frame of a stream carries ok
            if r["id"] == ids:
                status_seen = True
                continue
            self.assertIn(r["id"], parts)
            self.assertNotIn(r["id"], finished)
            self.assertLessEqual(len(r["data"]), ct.MAX_DATA)
            parts[r["id"]].append(r["data"])
            if not r.get("more"):
                finished.add(r["id"])
        self.assertEqual(b"".join(parts[ida]), a)
        self.assertEqual(b"".join(parts[idb]), b)
        self.finish()


class BoundedReplies(ProtocolTestCase):
    """Replies stay within the 1 MiB frame a client accepts (Conn refuses a
    longer frame, like the cairn client), however long the names and tags
    in them: a list page ends early, a stat cuts its oldest names."""

    def test_list_of_long_names_and_tags(self):
        # each doc's item takes about 20 KiB: 120 of them would be 2.4 MiB in one frame
        tags = ["t%03d-" % i + "x" * 250 for i in range(64)]
        want = []
        for i in range(120):
            name = ("%04d-" % i) + "n" * 4090
            want.append(self.assertOk(self.c.add(b"doc %d" % i, name=name, tags=tags))["hash"])
        rid = self.c.send_request("list")
        frames = []
        while True:
            msg = self.c.recv_for(rid)
            self.assertOk(msg)
            frames.append(len(msg["items"]))
            if not msg.get("more"):
                break
        self.assertGreater(len(frames), 2, frames)
        items = self.c.list_all()
        self.assertEqual([it["hash"] for it in items], sorted(want))
        self.assertTrue(all(len(it["tags"]) == 64 for it in items))
        p = self.d.cli("ls", "--json")
        self.assertEqual(len(p.stdout.decode().splitlines()), 120, p.stderr)
        for limit in (1, 7, 45):
            got = self.c.list_all(limit=limit)
            self.assertEqual([it["hash"] for it in got], sorted(want)[:limit])
        self.finish()

    def test_stat_of_a_document_with_many_names(self):
        # 300 names of 4 KiB: 1.2 MiB of names
        names = [("%04d-" % i) + "n" * 4090 for i in range(300)]
        for n in names:
            h = self.assertOk(self.c.add(b"one content, many names", name=n))["hash"]
        r = self.assertOk(self.c.call("stat", ref=h))
        kept = len(r["names"])
        self.assertGreater(kept, 10)
        self.assertEqual(r["names_cut"], 300 - kept)
        self.assertEqual(r["names"], names[300 - kept:], "the newest names, oldest first")
        p = self.d.cli("stat", h)
        self.assertIn(b"names_cut: %d" % (300 - kept), p.stdout)
        self.finish()


class ManyConnections(unittest.TestCase):
    N = 1000

    def test_1000_simultaneous_connections(self):
        if not ct.raise_nofile(self.N + 200):
            self.skipTest("cannot raise RLIMIT_NOFILE to %d" % (self.N + 200))
        d = ct.Daemon(self)
        d.start()  # inherits the raised limit
        conns = []
        self.addCleanup(lambda: [c.close() for c in conns])
        for _ in range(self.N):
            conns.append(d.connect())
        for i, c in enumerate(conns):
            c.send({"id": i + 1, "op": "status"})
        sel = selectors.DefaultSelector()
        for c in conns:
            c.sock.setblocking(False)
            sel.register(c.sock, selectors.EVENT_READ, c)
        pending = {id(c): c for c in conns}
        replies = {}
        deadline = time.monotonic() + ct.IO_TIMEOUT * 2
        while pending:
            self.assertLess(time.monotonic(), deadline, "%d connections got no reply" % len(pending))
            for key, _ in sel.select(timeout=1):
                c = key.data
                try:
                    chunk = c.sock.recv(65536)
                except BlockingIOError:
                    continue
                self.assertTrue(chunk, "daemon closed a connection instead of replying")
                c.buf += chunk
                if len(c.buf) >= 4 and len(c.buf) >= 4 + int.from_bytes(c.buf[:4], "big"):
                    n = int.from_bytes(c.buf[:4], "big")
                    replies[id(c)] = ct.unpackb(bytes(c.buf[4:4 + n]))
                    sel.unregister(c.sock)
                    del pending[id(c)]
        sel.close()
        for i, c in enumerate(conns):
            r = replies[id(c)]
            self.assertEqual(r["id"], i + 1)
            self.assertIs(r["ok"], True, ct.short(r))
        # all of them are still open, plus this one
        st = d.status()
        self.assertGreaterEqual(st["connections"], self.N)
        for c in conns:
            c.close()
        conns.clear()
        # closed connections are released (the gauge drops again)
        deadline = time.monotonic() + 30
        while d.status()["connections"] > 5:
            self.assertLess(time.monotonic(), deadline, "connections gauge never dropped")
            time.sleep(0.1)
        d.stop()


class Streams(ProtocolTestCase):
    def test_streamed_add_then_streamed_get(self):
        content = os.urandom(3 * ct.MiB + 123)
        r = self.assertOk(self.c.add(content, name="streamed.bin", size=len(content),
                                     mime="application/x-test", tags=["s"]))
        self.assertEqual(r["hash"], ct.sha256_hex(content))
        self.assertEqual(r["size"], len(content))
        self.assertEqual(r["name"], "streamed.bin")
        self.assertIs(r["new"], True)
        self.assertIsInstance(r["stored_size"], int)
        frames, got = self.c.get("streamed.bin")
        self.assertIsNotNone(got, ct.short(frames[-1]))
        self.assertEqual(got, content)
        self.assertGreaterEqual(len(frames), 13)  # at most 256 KiB a frame
        first = frames[0]
        self.assertEqual(first["hash"], r["hash"])
        self.assertEqual(first["name"], "streamed.bin")
        self.assertEqual(first["size"], len(content))
        self.assertEqual(first["mime"], "application/x-test")
        for f in frames[:-1]:
            self.assertIs(f["more"], True)
        self.assertFalse(frames[-1].get("more", False))
        self.finish()

    def test_client_data_frames_up_to_frame_limit(self):
        # The 256 KiB data limit is for the daemon's frames; a client may fill
        # a whole 1 MiB frame.
        content = os.urandom(3 * ct.MiB)
        r = self.assertOk(self.c.add(content, chunk=ct.MAX_FRAME - 64))
        self.assertEqual(r["hash"], ct.sha256_hex(content))
        _, got = self.c.get(r["hash"])
        self.assertEqual(got, content)
        self.finish()

    def test_frame_of_exactly_1_mib_accepted(self):
        head = ct.packb({"id": 3, "op": "add", "more": False})
        # fixmap(3) -> fixmap(4); the data entry: fixstr "data" + bin32 header
        overhead = len(head) + 5 + 5
        content = os.urandom(ct.MAX_FRAME - overhead)
        payload = bytes([0x84]) + head[1:] + b"\xa4data" + b"\xc6" + len(content).to_bytes(4, "big") + content
        self.assertEqual(len(payload), ct.MAX_FRAME)
        self.c.send_raw(len(payload).to_bytes(4, "big") + payload)
        r = self.assertOk(self.c.recv_for(3))
        self.assertEqual(r["hash"], ct.sha256_hex(content))
        self.finish()

    def test_empty_document_is_one_frame(self):
        r = self.assertOk(self.c.add(b"", name="empty"))
        self.assertEqual(r["hash"], ct.sha256_hex(b""))
        self.assertEqual(r["size"], 0)
        frames, got = self.c.get("empty")
        self.assertEqual(len(frames), 1)
        self.assertEqual(got, b"")
        self.assertFalse(frames[0].get("more", False))
        self.assertEqual(frames[0]["size"], 0)
        self.finish()

    def test_size_mismatch_fails(self):
        r = self.c.add(b"12345", size=10)
        self.assertError(r, "bad_request")
        r = self.c.add(os.urandom(600000), size=5)
        self.assertError(r, "bad_request")
        # nothing was stored
        self.assertEqual(self.c.list_all(), [])
        self.finish()

    def test_data_for_unknown_stream(self):
        self.c.send({"id": 42, "op": "data", "data": b"orphan", "more": False})
        self.assertError(self.c.recv_for(42), "bad_request")
        self.assertOk(self.c.call("status"))
        self.finish()

    def test_mistyped_data_frame_fails_the_add_and_the_rest_is_discarded(self):
        rid = self.c.next_id()
        self.c.send({"id": rid, "op": "add", "data": b"first piece ", "more": True})
        self.c.send({"id": rid, "op": "data", "data": "not bin", "more": True})
        self.assertError(self.c.recv_for(rid), "bad_request")
        # The rest of the stream, even mistyped again, is swallowed silently...
        self.c.send({"id": rid, "op": "data", "data": b"more", "more": True})
        self.c.send({"id": rid, "op": "data", "data": 5, "more": "yes"})
        self.c.send({"id": rid, "op": "data", "data": b"last", "more": False})
        # ...so the next frame on the connection is the status's reply, not an error about rid.
        sid = self.c.send_request("status")
        frame = self.c.recv_frame()
        self.assertEqual(frame.get("id"), sid, frame)
        self.assertOk(frame)
        # The id is free again after the frame with more: false.
        self.c.send({"id": rid, "op": "stat", "ref": "nothing-here"})
        self.assertError(self.c.recv_for(rid), "not_found")
        self.assertEqual(self.c.list_all(), [])
        self.finish()

    def test_mistyped_last_data_frame_ends_the_add(self):
        # A mistyped data frame whose more: false can be read (absent is false
        # too) is the stream's last: the add fails and its id is free at once.
        for last in ({"data": "not bin", "more": False}, {"data": 7},
                     {"data": b"fine", "more": False, "op": "data", "size": "x"}):
            with self.subTest(last=last):
                rid = self.c.next_id()
                self.c.send({"id": rid, "op": "add", "data": b"first piece ", "more": True})
                msg = {"id": rid, "op": "data"}
                msg.update(last)
                if last.get("size") == "x":
                    # data and more fine, an extra field mistyped: ignored, the add succeeds
                    self.c.send(msg)
                    self.assertOk(self.c.recv_for(rid))
                    continue
                self.c.send(msg)
                self.assertError(self.c.recv_for(rid), "bad_request")
                self.c.send({"id": rid, "op": "add", "data": b"reused " + str(rid).encode()})
                frame = self.c.recv_frame()
                self.assertEqual(frame.get("id"), rid, frame)
                self.assertOk(frame)
        self.finish()

    def test_mistyped_last_data_frame_ends_a_failed_add(self):
        # The add failed already (more bytes than its size), its reply sent; a
        # mistyped frame with more: false still ends the stream, silently.
        rid = self.c.next_id()
        self.c.send({"id": rid, "op": "add", "size": 2, "data": b"12345", "more": True})
        self.assertError(self.c.recv_for(rid), "bad_request")
        self.c.send({"id": rid, "op": "data", "data": 5, "more": False})
        self.c.send({"id": rid, "op": "add", "data": b"after a failed add"})
        frame = self.c.recv_frame()
        self.assertEqual(frame.get("id"), rid, frame)
        self.assertOk(frame)
        self.assertEqual(len(self.c.list_all()), 1)
        self.finish()

    def test_data_after_completed_add(self):
        rid = self.c.next_id()
        self.c.send({"id": rid, "op": "add", "data": b"done", "more": False})
        self.assertOk(self.c.recv_for(rid))
        self.c.send({"id": rid, "op": "data", "data": b"late", "more": False})
        self.assertError(self.c.recv_for(rid), "bad_request")
        self.finish()


class Operations(ProtocolTestCase):
    def test_add_dedup_and_merge(self):
        r1 = self.assertOk(self.c.add(b"same", name="one", tags=["a"], meta={"k1": "v1"}))
        r2 = self.assertOk(self.c.add(b"same", name="two", tags=["b"], meta={"k2": "v2"}))
        self.assertIs(r1["new"], True)
        self.assertIs(r2["new"], False)
        self.assertEqual(r1["hash"], r2["hash"])
        st = self.assertOk(self.c.call("stat", ref=r1["hash"]))
        self.assertEqual(sorted(st["tags"]), ["a", "b"])
        self.assertEqual(st["meta"], {"k1": "v1", "k2": "v2"})
        self.assertEqual(sorted(st["names"]), ["one", "two"])
        self.assertEqual(st["name"], "two")
        self.assertEqual(len(self.c.list_all()), 1)
        self.finish()

    def test_stat_fields(self):
        content = os.urandom(70000)
        before = int(time.time())
        r = self.assertOk(self.c.add(content, name="s.bin", tags=["t1", "t2"], meta={"a": "b"},
                                     mime="text/plain"))
        st = self.assertOk(self.c.call("stat", ref="s.bin"))
        self.assertEqual(st["hash"], r["hash"])
        self.assertEqual(st["name"], "s.bin")
        self.assertEqual(st["names"], ["s.bin"])
        self.assertEqual(st["size"], 70000)
        self.assertEqual(st["stored_size"], r["stored_size"])
        self.assertIsInstance(st["chunks"], int)
        self.assertGreaterEqual(st["chunks"], 1)
        self.assertEqual(st["mime"], "text/plain")
        self.assertLessEqual(before - 2, st["created"])
        self.assertLessEqual(st["created"], time.time() + 2)
        self.assertEqual(sorted(st["tags"]), ["t1", "t2"])
        self.assertEqual(st["meta"], {"a": "b"})
        # default mime
        r = self.assertOk(self.c.add(b"no mime"))
        self.assertEqual(self.c.call("stat", ref=r["hash"])["mime"], "application/octet-stream")
        self.assertEqual(r["name"], "")
        self.finish()

    def test_name_history_and_delete_fallback(self):
        h1 = self.assertOk(self.c.add(b"v1", name="doc"))["hash"]
        h2 = self.assertOk(self.c.add(b"v2", name="doc"))["hash"]
        _, got = self.c.get("doc")
        self.assertEqual(got, b"v2")
        _, got = self.c.get(h1)
        self.assertEqual(got, b"v1")
        # an older version: named by the ref that reaches it
        self.assertEqual(self.c.call("stat", ref=h1)["names"], ["doc@{1}"])
        d = self.assertOk(self.c.call("delete", ref=h2))
        self.assertEqual((d["hash"], d["names"], d["deleted"]), (h2, ["doc"], [h2]))
        self.assertEqual(self.c.call("stat", ref=h1)["names"], ["doc"])
        self.assertError(self.c.call("stat", ref=h2), "not_found")
        frames, got = self.c.get(h2)
        self.assertIsNone(got)
        self.assertError(frames[-1], "not_found")
        _, got = self.c.get("doc")
        self.assertEqual(got, b"v1")
        # by name: the name goes, every version of it, and what no other name points to
        h3 = self.assertOk(self.c.add(b"v3", name="doc"))["hash"]
        self.assertOk(self.c.add(b"v1", name="other"))
        d = self.assertOk(self.c.call("delete", ref="doc", dry_run=True))
        self.assertEqual((d["hash"], d["name"], d["names"], d["deleted"], d["dry_run"]),
                         (h3, "doc", ["doc"], [h3], True))
        self.assertOk(self.c.call("stat", ref=h3))
        d = self.assertOk(self.c.call("delete", ref="doc"))
        self.assertEqual((d["names"], d["deleted"], d["dry_run"]), (["doc"], [h3], False))
        self.assertEqual(self.c.call("stat", ref=h1)["names"], ["other"])
        self.assertError(self.c.call("delete", ref="doc"), "not_found")
        self.assertError(self.c.call("delete", ref="other", dry_run="yes"), "bad_request")
        self.assertOk(self.c.call("delete", ref="other"))
        self.assertEqual(self.c.list_all(), [])
        self.finish()

    def test_references(self):
        h = self.assertOk(self.c.add(b"ref target", name="target"))["hash"]
        for ref in (h, h[:8], h[:33], h[:63], "target"):
            self.assertEqual(self.c.call("stat", ref=ref).get("hash"), h, ref)
        for ref in (h[:7], "", "missing", "0" * 64):
            self.assertError(self.c.call("stat", ref=ref), "not_found", "bad_request")
        self.assertError(self.c.call("stat"), "bad_request")
        self.finish()

    def test_ambiguous_prefix(self):
        a, b = ct.colliding_pair(8)
        ha = self.assertOk(self.c.add(a))["hash"]
        hb = self.assertOk(self.c.add(b))["hash"]
        self.assertEqual(ha[:8], hb[:8])
        self.assertError(self.c.call("stat", ref=ha[:8]), "ambiguous")
        frames, got = self.c.get(ha[:8])
        self.assertIsNone(got)
        self.assertError(frames[-1], "ambiguous")
        self.assertError(self.c.call("delete", ref=ha[:8]), "ambiguous")
        self.assertEqual(len(self.c.list_all()), 2)  # the ambiguous delete removed nothing
        self.assertEqual(self.c.call("stat", ref=ha).get("hash"), ha)
        self.finish()

    def test_status_fields(self):
        self.assertOk(self.c.add(b"abc"))
        self.assertOk(self.c.add(b"defgh"))
        st = self.assertOk(self.c.call("status"))
        for key in ("version", "backend"):
            self.assertIsInstance(st[key], str)
        for key in ("protocol", "pid", "uptime", "documents", "logical_bytes", "stored_bytes",
                    "chunks", "connections"):
            self.assertIsInstance(st[key], int, key)
        self.assertEqual(st["pid"], self.d.pid)
        self.assertEqual(st["documents"], 2)
        self.assertEqual(st["logical_bytes"], 8)
        self.assertGreaterEqual(st["connections"], 1)
        self.finish()


class Listing(ProtocolTestCase):
    def test_list_order_filter_paging(self):
        expected = {}
        for i in range(7):
            content = b"list-%d" % i
            tags = ["even"] if i % 2 == 0 else []
            r = self.assertOk(self.c.add(content, name="n%d" % i, tags=tags))
            expected[r["hash"]] = (i, tags)
        items = self.c.list_all()
        hashes = [it["hash"] for it in items]
        self.assertEqual(hashes, sorted(expected))
        for it in items:
            i, tags = expected[it["hash"]]
            self.assertEqual(it["name"], "n%d" % i)
            self.assertEqual(it["size"], len(b"list-%d" % i))
            self.assertEqual(it["tags"], tags)
            self.assertEqual(it["mime"], "application/octet-stream")
            self.assertIsInstance(it["created"], int)
            self.assertIsInstance(it["stored_size"], int)
        even = [it["hash"] for it in self.c.list_all(tag="even")]
        self.assertEqual(even, sorted(h for h, (i, _) in expected.items() if i % 2 == 0))
        self.assertEqual(self.c.list_all(tag="nope"), [])
        page = self.c.list_all(limit=3)
        self.assertEqual([it["hash"] for it in page], hashes[:3])
        page = self.c.list_all(limit=3, after=hashes[2])
        self.assertEqual([it["hash"] for it in page], hashes[3:6])
        page = self.c.list_all(after=hashes[5])
        self.assertEqual([it["hash"] for it in page], hashes[6:])
        self.finish()

    def test_list_more_than_500_documents(self):
        n = 510
        wire = bytearray()
        for i in range(n):
            wire += ct.frame({"id": 10 + i, "op": "add", "data": b"bulk-%d" % i})
        self.c.send_raw(bytes(wire))
        hashes = set()
        for i in range(n):
            r = self.assertOk(self.c.recv_for(10 + i, timeout=120 * ct.SLOW))
            hashes.add(r["hash"])
        rid = self.c.send_request("list")
        frames = []
        while True:
            r = self.assertOk(self.c.recv_for(rid))
            frames.append(r)
            self.assertLessEqual(len(r["items"]), 500)
            if not r.get("more"):
                break
        self.assertGreaterEqual(len(frames), 2)
        listed = [it["hash"] for f in frames for it in f["items"]]
        self.assertEqual(listed, sorted(hashes))
        self.finish()


class Limits(ProtocolTestCase):
    def test_field_limits(self):
        self.assertOk(self.c.add(b"x", name="n" * 4096))
        self.assertError(self.c.add(b"x", name="n" * 4097), "too_large", "bad_request")
        self.assertOk(self.c.add(b"x", tags=["t%d" % i for i in range(64)]))
        self.assertError(self.c.add(b"y", tags=["t%d" % i for i in range(65)]), "too_large", "bad_request")
        self.assertError(self.c.add(b"y", tags=["t" * 257]), "too_large", "bad_request")
        self.assertError(self.c.add(b"y", tags=[""]), "bad_request")
        self.assertError(self.c.add(b"y", meta={"k%d" % i: "v" for i in range(65)}),
                         "too_large", "bad_request")
        self.assertError(self.c.add(b"y", meta={"k" * 257: "v"}), "too_large", "bad_request")
        self.assertError(self.c.add(b"y", meta={"k": "v" * 4097}), "too_large", "bad_request")
        self.assertError(self.c.add(b"y", mime="m" * 256), "too_large", "bad_request")
        self.assertError(self.c.call("get", ref="r" * 4097), "too_large", "bad_request")
        # none of the rejected adds stored anything
        self.assertEqual({it["hash"] for it in self.c.list_all()}, {ct.sha256_hex(b"x")})
        self.finish()



class HelloFields(unittest.TestCase):
    def test_client_must_be_a_string(self):
        d = ct.Daemon(self).start()
        with d.connect() as c:
            for bad in (7, ["x"], {"a": 1}, True, "x" * 5000):
                with self.subTest(client=str(bad)[:20]):
                    r = c.call("hello", versions=[1], client=bad)
                    self.assertEqual(ct.error_code(r), "bad_request", r)
            r = c.call("hello", versions=[1], client="tests/1.0")
            self.assertIs(r.get("ok"), True, r)
            r = c.call("hello")
            self.assertEqual(r.get("version"), 1, r)


class JobProgress(unittest.TestCase):
    """gc and verify with progress: true send `more: true` frames with
    `progress` while they run, then their reply. CAIRN_TEST_PROGRESS_MS=1
    makes the interval 1 ms, so a job of a few milliseconds has frames."""

    def setUp(self):
        self.d = ct.Daemon(self, env={"CAIRN_TEST_PROGRESS_MS": "1"}).start()
        self.c = self.d.connect()
        self.addCleanup(self.c.close)

    def frames(self, op, **fields):
        rid = self.c.send_request(op, progress=True, **fields)
        out = []
        while True:
            f = self.c.recv_for(rid, 120 * ct.SLOW)
            out.append(f)
            if not f.get("more"):
                return out[:-1], f

    def test_verify_and_gc_report_progress(self):
        hashes = [self.c.add(os.urandom(4 * 1024 * 1024), name="f%d" % i)["hash"] for i in range(8)]
        ticks, final = self.frames("verify")
        self.assertIs(final.get("ok"), True, ct.short(final))
        self.assertEqual(final["bytes_checked"], 32 * 1024 * 1024)
        self.assertGreater(len(ticks), 0, "no progress frame from a verify of 32 MiB at 1 ms")
        done = [t["progress"]["done"] for t in ticks]
        self.assertEqual(done, sorted(done))
        for t in ticks:
            self.assertIs(t.get("ok"), True)
            p = t["progress"]
            self.assertEqual(p["phase"], "verify")
            # total is 0 (unknown) until the chunks are counted, then their bytes, as
            # bytes_checked counts them (it was the packs' bytes, done the records')
            if p["total"]:
                self.assertEqual(p["total"], final["bytes_checked"])
                self.assertLessEqual(p["done"], p["total"])
        self.assertTrue(any(t["progress"]["total"] for t in ticks), ticks)
        for h in hashes:
            self.assertIs(self.c.call("delete", ref=h).get("ok"), True)
        ticks, final = self.frames("gc")
        self.assertIs(final.get("ok"), True, ct.short(final))
        self.assertGreater(final["chunks_removed"], 0)
        for t in ticks:
            self.assertIn(t["progress"]["phase"], ("start", "refresh", "mark", "sweep", "repack"))
        # without progress: one reply, as before
        rid = self.c.send_request("verify")
        self.assertNotIn("more", self.c.recv_for(rid, 120 * ct.SLOW))
        r = self.c.call("verify", progress="yes")
        self.assertEqual(ct.error_code(r), "bad_request", r)
        self.d.assert_healthy()
        self.d.stop()

    def test_client_gone_mid_job(self):
        """A connection closed while its verify ticks: the job ends, its
        timer closes, the daemon serves on (ASan checks nothing is used
        after it is freed)."""
        for i in range(6):
            self.c.add(os.urandom(4 * 1024 * 1024), name="g%d" % i)
        for _ in range(3):
            with self.d.connect() as other:
                rid = other.send_request("verify", progress=True)
                f = other.recv_for(rid, 120 * ct.SLOW)
                self.assertIs(f.get("more"), True, ct.short(f))
        self.assertIs(self.c.call("status").get("ok"), True)
        self.d.assert_healthy()
        self.d.stop()


class RangedGet(unittest.TestCase):
    """get with offset and length streams those bytes only, across chunk
    boundaries, and the first frame still gives the whole document's size."""

    def setUp(self):
        self.d = ct.Daemon(self).start()
        self.c = self.d.connect()
        self.addCleanup(self.c.close)

    def ranged(self, ref, **fields):
        rid = self.c.send_request("get", ref=ref, **fields)
        frames, data = self.c.collect_stream(rid)
        self.assertIsNotNone(data, frames[-1])
        return frames[0], data

    def test_ranges(self):
        content = os.urandom(3 * 1024 * 1024 + 12345)  # many chunks
        h = self.c.add(content)["hash"]
        size = len(content)
        cases = [(0, 1), (0, 100000), (65536, 70000), (1000000, 1), (size - 10, 10),
                 (size - 10, 1000), (size, 5), (size + 100, 5), (123, 0), (0, size),
                 (2 * 1024 * 1024 + 7, 2 ** 64 - 1 - (2 * 1024 * 1024 + 7))]
        for off, length in cases:
            with self.subTest(offset=off, length=length):
                first, data = self.ranged(h, offset=off, length=length)
                self.assertEqual(first["size"], size)
                self.assertEqual(first["hash"], h)
                self.assertEqual(data, content[off:off + length])
        first, data = self.ranged(h, offset=3000000)
        self.assertEqual(data, content[3000000:])
        # An empty document and a small one.
        e = self.c.add(b"")["hash"]
        self.assertEqual(self.ranged(e, offset=0, length=10)[1], b"")
        self.assertEqual(self.ranged(e, offset=5)[1], b"")
        s = self.c.add(b"0123456789")["hash"]
        self.assertEqual(self.ranged(s, offset=3, length=4)[1], b"3456")

    def test_bad_fields(self):
        h = self.c.add(b"x")["hash"]
        for fields in ({"offset": -1}, {"offset": "1"}, {"length": 1.5}, {"length": -3}):
            with self.subTest(fields=fields):
                rid = self.c.send_request("get", ref=h, **fields)
                r = self.c.recv_for(rid)
                self.assertEqual(ct.error_code(r), "bad_request", r)
        self.assertEqual(self.c.call("status").get("ok"), True)


if __name__ == "__main__":
    ct.main()
