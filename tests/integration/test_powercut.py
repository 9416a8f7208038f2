#!/usr/bin/env python3
"""Acknowledged writes survive a power cut, not only kill -9.

cairnd's data directory lives on powercutfs (tests/powercut), which keeps
only what was synced when the power goes. Threads add, delete (`cairn rm`)
and collect garbage (`gc`) concurrently; at a random moment the power is cut:
the file system drops everything unsynced and refuses further writes, cairnd
is killed, and the power comes back. Some cycles then cut the power again
during `cairnd --rebuild-index`. After every cut cairnd must start by itself,
every acknowledged add must read back with its hash, every acknowledged
delete must stay deleted, and `cairn verify` must be clean.

The second case runs the same with CAIRN_TEST_NO_SYNC=1 (cairnd syncs
nothing) and requires the checks to fail: the first case could not pass by
being unable to see a lost write.

CAIRN_POWERCUT_SEED reruns a schedule (the seed is printed); threads still
interleave as they will. CAIRN_POWERCUT_CUTS sets the number of cuts (the
long tier: a few hundred).
"""

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

POWERCUTFS = os.environ.get("POWERCUTFS") or os.path.join(
    ct.REPO_ROOT, "build", "tests", "powercut", "powercutfs")
CUTS = int(os.environ.get("CAIRN_POWERCUT_CUTS") or 50)
NO_SYNC_CUTS = 20  # the no-sync case must fail within this many


def skip_reason():
    if os.geteuid() != 0:
        return "needs root to mount powercutfs"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if not shutil.which("fusermount3"):
        return "no fusermount3 (Debian package fuse3)"
    if not os.access(POWERCUTFS, os.X_OK):
        return "powercutfs not built at %s (set $POWERCUTFS)" % POWERCUTFS
    return None


class PowercutFS:
    """powercutfs mounted on `mountpoint` for one test case; the cleanup
    unmounts it and stops the process by its pid, whatever happened."""

    def __init__(self, testcase, mountpoint, log_path):
        self.mountpoint = mountpoint
        self.control = os.path.join(mountpoint, ".powercut")
        self.log_path = log_path
        os.makedirs(mountpoint, exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([POWERCUTFS, mountpoint], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        testcase.addCleanup(self.stop)
        deadline = time.monotonic() + 10 * ct.SLOW
        while not (os.path.ismount(mountpoint) and os.path.exists(self.control)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("powercutfs did not mount on %s (exit %r)"
                                     % (mountpoint, self.proc.poll()))
            time.sleep(0.02)

    def command(self, word):
        fd = os.open(self.control, os.O_WRONLY)
        try:
            os.write(fd, word.encode())
        finally:
            os.close(fd)

    def counters(self):
        with open(self.control) as f:
            return {k: int(v) for k, v in (line.split() for line in f if line.strip())}

    def stop(self):
        if os.path.ismount(self.mountpoint):
            if subprocess.run(["fusermount3", "-u", self.mountpoint]).returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint])
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError("powercutfs did not exit when unmounted")
        # a crash, or under ASan a leak or a memory error
        if rc != 0:
            raise AssertionError("powercutfs exited with %d:\n%s" % (rc, self.log_tail()))

    def log_tail(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")


def make_content(rng, shared):
    """Random bytes, different from every other document's (Ledger relies
    on it); some start with a block other documents share, so that gc has
    chunks that one document leaves and another still uses."""
    roll = rng.random()
    if roll < 0.80:
        size = rng.randint(0, 8 * 1024)
    elif roll < 0.98:
        size = rng.randint(8 * 1024, 100 * 1024)
    else:
        size = rng.randint(300 * 1024, 700 * 1024)  # several frames
    tail = rng.randbytes(size) + os.urandom(16)
    return rng.choice(shared) + tail if rng.random() < 0.3 else tail


class Ledger:
    """What the daemon acknowledged. A hash whose fate is unknown (an add or
    delete in flight at the cut, when its document may or may not exist) is
    in neither set and never checked again; every content is unique, so
    nothing is added again after a delete."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live = {}         # hash -> content: acknowledged adds
        self.deleted = set()   # acknowledged deletes
        self.acks = 0

    def added(self, h, content):
        with self.lock:
            self.live[h] = content
            self.acks += 1

    def take_for_delete(self, rng, keep):
        """A live document to delete while more than `keep` are live."""
        with self.lock:
            if len(self.live) <= keep:
                return None
            h = rng.choice(list(self.live))
            del self.live[h]  # unknown until the delete is acknowledged
            return h

    def removed(self, h):
        with self.lock:
            self.deleted.add(h)
            self.acks += 1


class Workload:
    """The threads of one power-on period, until the cut."""

    ADDERS = 3
    LIVE = 200

    def __init__(self, d, ledger, seed):
        self.d = d
        self.ledger = ledger
        self.seed = seed
        self.stop = threading.Event()
        self.cutting = threading.Event()  # set before the cut: failures after it are expected
        self.errors = []
        self.gcs = self.packs_gone = 0
        srng = random.Random(seed)
        self.shared = [srng.randbytes(64 * 1024) for _ in range(8)]
        self.threads = [threading.Thread(target=self.adder, args=(k,), daemon=True)
                        for k in range(self.ADDERS)]
        self.threads += [threading.Thread(target=self.deleter, daemon=True),
                         threading.Thread(target=self.collector, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()

    def failed(self, what):
        """A request failed; before the cut, that is an error of its own."""
        if not self.cutting.is_set():
            self.errors.append("%s failed before the cut" % what)

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(120 * ct.SLOW)
            if t.is_alive():
                self.errors.append("a client thread hangs after the cut")

    def adder(self, k):
        """Adds; deletes instead while more than LIVE documents are live,
        since the checks after each cut read them all."""
        rng = random.Random(self.seed * 10 + k)
        try:
            conn = self.d.connect()
        except OSError as e:
            return self.failed("connect: %r" % e)
        with conn:
            while not self.stop.is_set():
                h = self.ledger.take_for_delete(rng, self.LIVE)
                if h is not None:
                    try:
                        r = conn.call("delete", ref=h)
                    except (ct.ConnectionClosed, OSError) as e:
                        return self.failed("delete: %r" % e)  # its fate is unknown
                    if r.get("ok") is not True:
                        return self.failed("delete: %r" % ct.short(r))
                    self.ledger.removed(h)
                    continue
                content = make_content(rng, self.shared)
                try:
                    r = conn.add(content, name="p%d-%d-%d" % (self.seed, k, rng.getrandbits(40)))
                except (ct.ConnectionClosed, OSError) as e:
                    return self.failed("add: %r" % e)
                if r.get("ok") is not True:
                    return self.failed("add: %r" % ct.short(r))  # storage_error: the disk is dead
                if r.get("hash") != hashlib.sha256(content).hexdigest():
                    self.errors.append("acknowledged hash %r does not match" % r.get("hash"))
                    return
                self.ledger.added(r["hash"], content)

    def deleter(self):
        """Deletes through `cairn rm`, beside the adders' deletes."""
        rng = random.Random(self.seed * 10 + 8)
        while not self.stop.is_set():
            h = self.ledger.take_for_delete(rng, 20)
            if h is None:
                time.sleep(0.02)
                continue
            p = self.d.cli("rm", h, check_exit=None, timeout=60 * ct.SLOW)
            if p.returncode != 0:
                return self.failed("cairn rm: %r" % p.stderr[-500:])  # its fate is unknown
            self.ledger.removed(h)

    def collector(self):
        rng = random.Random(self.seed * 10 + 9)
        try:
            conn = self.d.connect()
        except OSError as e:
            return self.failed("connect: %r" % e)
        with conn:
            while not self.stop.wait(rng.uniform(0, 0.2)):
                try:
                    r = conn.call("gc")
                except (ct.ConnectionClosed, OSError) as e:
                    return self.failed("gc: %r" % e)
                if r.get("ok") is not True:
                    return self.failed("gc: %r" % ct.short(r))
                self.gcs += 1
                self.packs_gone += r.get("packs_rewritten", 0) + r.get("packs_deleted", 0)


def pipelined_gets(conn, hashes, depth=16):
    """(hash, (frames, content or None)) for each hash, `depth` requests in
    flight at a time: the checks after every cut read thousands."""
    for i in range(0, len(hashes), depth):
        part = hashes[i:i + depth]
        rids = [conn.send_request("get", ref=h) for h in part]
        for h, rid in zip(part, rids):
            yield h, conn.collect_stream(rid)


class FileSystem(unittest.TestCase):
    """powercutfs keeps what was synced, as Linux defines it, and nothing else."""

    def setUp(self):
        reason = skip_reason()
        if reason:
            self.skipTest(reason)
        base = ct.make_tempdir(self, prefix="cairn-powercut-")
        self.fs = PowercutFS(self, os.path.join(base, "mnt"), os.path.join(base, "fs.log"))
        self.root = self.fs.mountpoint

    def path(self, *names):
        return os.path.join(self.root, *names)

    def write(self, name, data, sync=False, flags=os.O_CREAT | os.O_WRONLY | os.O_TRUNC):
        fd = os.open(self.path(name), flags, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def sync_dir(self, name=""):
        fd = os.open(self.path(name), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def power_cycle(self):
        self.fs.command("cut")
        self.fs.command("up")

    def test_only_synced_state_survives(self):
        os.mkdir(self.path("d"))
        self.write("d/synced", b"data", sync=True)
        self.power_cycle()
        self.assertFalse(os.path.exists(self.path("d")), "a directory whose parent was not synced")

        os.mkdir(self.path("d"))
        self.sync_dir()
        self.write("d/a", b"old", sync=True)
        self.write("d/b", b"never synced")
        self.sync_dir("d")
        self.write("d/a", b" and new", flags=os.O_WRONLY | os.O_APPEND)
        self.assertEqual(self.read("d/a"), b"old and new")
        self.power_cycle()
        self.assertEqual(self.read("d/a"), b"old", "only the synced bytes")
        self.assertEqual(self.read("d/b"), b"", "a durable name, data never synced")

        os.rename(self.path("d/a"), self.path("d/c"))
        os.unlink(self.path("d/b"))
        self.power_cycle()
        self.assertEqual(sorted(os.listdir(self.path("d"))), ["a", "b"], "changes to d not synced")
        os.rename(self.path("d/a"), self.path("d/c"))
        self.sync_dir("d")
        self.power_cycle()
        self.assertEqual(sorted(os.listdir(self.path("d"))), ["b", "c"])
        self.assertEqual(self.read("d/c"), b"old")

        fd = os.open(self.path("d/c"), os.O_RDWR)
        os.ftruncate(fd, 1)
        os.ftruncate(fd, 3)
        os.fdatasync(fd)
        os.close(fd)
        self.power_cycle()
        self.assertEqual(self.read("d/c"), b"o\0\0", "a truncate, then zeros")

        # between directories, each side is durable when its directory is synced
        os.rename(self.path("d/c"), self.path("moved"))
        self.sync_dir()
        self.power_cycle()
        self.assertEqual(self.read("moved"), b"o\0\0")
        self.assertEqual(self.read("d/c"), b"o\0\0", "the source directory was not synced")

    def test_dead_until_up_and_sync(self):
        self.write("f", b"x")
        self.fs.command("cut")
        with self.assertRaises(OSError):
            os.mkdir(self.path("e"))
        self.fs.command("up")
        self.assertFalse(os.path.exists(self.path("f")))
        self.write("f", b"y")
        self.fs.command("sync")
        self.power_cycle()
        self.assertEqual(self.read("f"), b"y")
        counters = self.fs.counters()
        self.assertEqual(counters["cuts"], 2)
        self.assertEqual(counters["dead"], 0)

    def test_shared_mapping(self):
        """SQLite maps its -shm file: FUSE allows that without direct_io only."""
        import mmap
        fd = os.open(self.path("shm"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.ftruncate(fd, 8192)
            with mmap.mmap(fd, 8192) as m:
                m[4096:4099] = b"abc"
                m.flush()
        finally:
            os.close(fd)
        self.assertEqual(self.read("shm")[4096:4099], b"abc")


class PowerCuts(unittest.TestCase):
    def setUp(self):
        reason = skip_reason()
        if reason:
            self.skipTest(reason)
        self.seed = int(os.environ.get("CAIRN_POWERCUT_SEED") or random.randrange(1 << 32))
        print("%s: seed %d (rerun with CAIRN_POWERCUT_SEED=%d)"
              % (self.id(), self.seed, self.seed), file=sys.stderr)
        self.rng = random.Random(self.seed)
        self.base = ct.make_tempdir(self, prefix="cairn-powercut-")
        self.fs = PowercutFS(self, os.path.join(self.base, "mnt"),
                             os.path.join(self.base, "powercutfs.log"))

    def daemon(self, env):
        # Small packs, so that packs are sealed and gc rewrites and deletes them.
        config = os.path.join(self.base, "cairn.conf")
        with open(config, "w") as f:
            f.write("[store]\npack_size = 1M\nrepack_threshold = 60\n")
        return ct.Daemon(self, base=self.base, data_dir=os.path.join(self.fs.mountpoint, "data"),
                         args=["--config", config], env=env)

    def cut(self, proc):
        """The power goes: nothing unsynced survives, and the disk is dead
        until the daemon is gone, so that it cannot make anything more durable."""
        self.fs.command("cut")
        proc.kill()
        proc.wait()
        self.fs.command("up")

    def rebuild_and_cut(self, d):
        """cairnd --rebuild-index, cut at a random moment (or let finish).
        Returns (cut, problem): whether the cut came before the rebuild
        ended, and what went wrong if it ended badly."""
        with open(d.log_path, "ab") as log:
            log.write(b"=== rebuild-index\n")
            log.flush()
            proc = subprocess.Popen([ct.CAIRND, "--data-dir", d.data_dir] + d.args + ["--rebuild-index"],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=d.env())
        try:
            rc = proc.wait(self.rng.uniform(0.02, 1.5) * ct.SLOW)
        except subprocess.TimeoutExpired:
            self.cut(proc)
            return True, None
        if self.rng.random() < 0.5:
            # The power goes once the rebuild has said it is done.
            self.fs.command("cut")
            self.fs.command("up")
        elif "CAIRN_TEST_NO_SYNC" not in d.extra_env:
            # The next start's syncfs(2) makes durable what the rebuild left
            # unsynced; FUSE does not pass syncfs on (README.md), so do it here.
            self.fs.command("sync")
        return False, None if rc == 0 else "cairnd --rebuild-index exits %d" % rc

    def problems(self, d, ledger, verify=True):
        """What a cut broke; [] when nothing. Starts cairnd unless it runs
        (the soak also checks a cairnd that outlived its server's crash);
        verify=False leaves out `cairn verify`."""
        try:
            if not d.running():
                d.start()
        except AssertionError as e:
            return ["cairnd does not start after the cut: %s" % e]
        out = []
        with d.connect(timeout=120 * ct.SLOW) as c:
            for h, (frames, got) in pipelined_gets(c, list(ledger.live)):
                content = ledger.live[h]
                if got is None:
                    out.append("acknowledged add %s lost: %r" % (h, ct.short(frames[-1])))
                elif hashlib.sha256(got).hexdigest() != h or got != content:
                    out.append("acknowledged add %s reads back wrong (%d bytes)" % (h, len(got)))
            for h, (frames, got) in pipelined_gets(c, list(ledger.deleted)):
                code = ct.error_code(frames[-1])
                if code != "not_found":
                    out.append("acknowledged delete %s undone: get gives %r"
                               % (h, code or "the document"))
        if not verify:
            return out
        p = d.cli("--json", "verify", check_exit=None, timeout=300 * ct.SLOW)
        if p.returncode != 0:
            out.append("cairn verify exits %d: %s" % (p.returncode, p.stderr[-1000:]))
        else:
            [v] = ct.parse_json_lines(p.stdout)
            if v.get("bad_count") != 0:
                out.append("cairn verify finds damage: %s" % ct.short(v, 1000))
        return out

    def run_cuts(self, cuts, env, sync_at_start=False):
        """Cuts the power `cuts` times; returns (cut number, problems) at the
        first cut that broke something, else (None, []). sync_at_start makes
        everything durable once cairnd has started, as the kernel's writeback
        would a while later: then what a cut takes is what came after."""
        d = self.daemon(env)
        d.start()
        ledger = Ledger()
        dropped = rebuilds_cut = gcs = packs_gone = 0
        started = time.monotonic()
        for n in range(1, cuts + 1):
            if sync_at_start:
                self.fs.command("sync")
            work = Workload(d, ledger, self.rng.randrange(1 << 30))
            work.start()
            time.sleep(self.rng.uniform(0.1, 0.8))
            before = self.fs.counters()["dropped"]
            work.cutting.set()
            self.cut(d.proc)
            dropped += self.fs.counters()["dropped"] > before
            work.join()
            gcs += work.gcs
            packs_gone += work.packs_gone
            self.assertFalse(work.errors, work.errors)
            found = []
            if n % 5 == 0 and n < cuts:
                was_cut, problem = self.rebuild_and_cut(d)
                rebuilds_cut += was_cut
                found += [problem] if problem else []
            found += self.problems(d, ledger)
            if found:
                more = ["... and %d more" % (len(found) - 10)] if len(found) > 10 else []
                return n, found[:10] + more + [d.log_tail(4000)]
        print("%d cuts in %.0f s (%d dropped unsynced state), %d more during a rebuild; "
              "%d acknowledged writes; %d documents and %d deletes checked after the last; "
              "%d gc runs rewrote or deleted %d packs"
              % (cuts, time.monotonic() - started, dropped, rebuilds_cut, ledger.acks,
                 len(ledger.live), len(ledger.deleted), gcs, packs_gone), file=sys.stderr)
        self.assertGreater(len(ledger.live), 0, "no add was ever acknowledged")
        self.assertGreater(len(ledger.deleted), 0, "no delete was ever acknowledged")
        # a cut at a moment when everything was synced proves nothing
        self.assertGreater(dropped, cuts // 2, "most cuts found nothing unsynced to drop")
        d.stop()
        return None, []

    def test_acknowledged_writes_survive_power_cuts(self):
        n, found = self.run_cuts(max(1, CUTS), {})
        if n is not None:
            # The file system goes with the test: keep what the cut left for a look.
            kept = ct.make_tempdir(prefix="cairn-powercut-failed-")
            shutil.copytree(self.fs.mountpoint, os.path.join(kept, "mnt"), symlinks=True)
            for name in os.listdir(self.base):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(self.base, name), kept)
            found.append("what the cut left (with the logs): %s" % kept)
        self.assertIsNone(n, "seed %d, cut %d:\n%s" % (self.seed, n or 0, "\n".join(found)))

    def test_without_syncs_the_cuts_lose_writes(self):
        n, found = self.run_cuts(NO_SYNC_CUTS, {"CAIRN_TEST_NO_SYNC": "1"}, sync_at_start=True)
        self.assertIsNotNone(n, "with CAIRN_TEST_NO_SYNC=1 cairnd survived %d power cuts: "
                             "the test cannot see a missing sync" % NO_SYNC_CUTS)
        print("without syncs, cut %d broke the store: %s" % (n, found[0]), file=sys.stderr)


if __name__ == "__main__":
    ct.main()
