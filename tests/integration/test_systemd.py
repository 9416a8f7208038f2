#!/usr/bin/env python3
"""cairnd under systemd, without systemd as PID 1:

  SocketActivation  `systemd-socket-activate -l SOCK cairnd ...` hands
                    cairnd its listening socket: clients add and get, the
                    peer uid check still applies, the socket file stays for
                    the socket unit after a stop; a passed fd of the wrong
                    kind (not listening, datagram, TCP, not a socket, two
                    fds) stops cairnd at start with a clear message
  Notify            a NOTIFY_SOCKET of the test's own receives STATUS= while
                    starting, READY=1, STATUS=serving N connections,
                    STOPPING=1 on SIGTERM; with WATCHDOG_USEC=200000,
                    WATCHDOG=1 keeps coming; nothing without WATCHDOG_USEC
  JournalPriority   with JOURNAL_STREAM naming stderr every line starts with
                    its <N> syslog priority, start-up failures included;
                    with JOURNAL_STREAM naming another stream, none does
  Units             the generated units (BUILDDIR/systemd, $CAIRN_SYSTEMD_UNITS)
                    pass `systemd-analyze verify`, and the system service's
                    `systemd-analyze security --offline=true` exposure is at
                    most 3.0

Tests that need systemd-socket-activate or systemd-analyze (Debian package
`systemd`) skip with the reason when they are missing.
"""

import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

SOCKET_ACTIVATE = shutil.which("systemd-socket-activate")
ANALYZE = shutil.which("systemd-analyze")
UNITS = os.environ.get("CAIRN_SYSTEMD_UNITS") or os.path.join(ct.REPO_ROOT, "build", "systemd")
NOBODY = 65534

# Variables systemd-socket-activate passes on to cairnd (it clears the rest).
PASS_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "ASAN_OPTIONS", "UBSAN_OPTIONS",
            "LSAN_OPTIONS", "GLIBC_TUNABLES", "MALLOC_PERTURB_", "XDG_RUNTIME_DIR")


class NotifyReceiver:
    """An AF_UNIX datagram socket in a temp dir, read by a thread; every
    datagram is kept with its arrival time."""

    def __init__(self, testcase):
        self.dir = ct.make_tempdir(testcase, "cairn-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.msgs = []  # (monotonic time, text)
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        testcase.addCleanup(self.close)

    def _run(self):
        while not self.done:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.msgs.append((time.monotonic(), data.decode("utf-8", "replace")))

    def close(self):
        self.done = True
        self.thread.join(5)
        self.sock.close()

    def messages(self):
        with self.lock:
            return list(self.msgs)

    def assignments(self):
        """Every KEY=VALUE line of every datagram, in order: [(time, line)]."""
        return [(t, line) for t, m in self.messages() for line in m.split("\n") if line]

    def wait_for(self, pred, timeout=ct.STARTUP_TIMEOUT, what="a notification", after=0.0):
        """The first line (received after time `after`) for which pred is true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in self.assignments():
                if t > after and pred(line):
                    return t, line
            time.sleep(0.02)
        raise AssertionError("no %s within %ds; got %r" % (what, timeout, self.messages()[-30:]))


class Activated:
    """cairnd behind `systemd-socket-activate -l SOCKET`: the socket exists
    at once; cairnd is executed (same pid) at the first connection."""

    def __init__(self, testcase, env=None, args=()):
        if SOCKET_ACTIVATE is None:
            testcase.skipTest("systemd-socket-activate not installed (Debian package systemd)")
        if ct.REMOTE:
            testcase.skipTest("socket activation is tested with the local backend")
        self.base = ct.make_tempdir(testcase)
        self.socket_path = os.path.join(self.base, "run", "cairnd.sock")
        self.flag_socket = os.path.join(self.base, "flag", "cairnd.sock")
        self.data_dir = os.path.join(self.base, "data")
        self.log_path = os.path.join(self.base, "cairnd.log")
        os.mkdir(os.path.dirname(self.socket_path), 0o700)
        env = dict(os.environ, **(env or {}))
        cmd = [SOCKET_ACTIVATE, "-l", self.socket_path]
        for k in PASS_ENV:
            if k in env:
                cmd += ["-E", k]
        # --socket names another path: the socket from systemd wins.
        cmd += [ct.CAIRND, "--socket", self.flag_socket, "--data-dir", self.data_dir,
                "--config", os.devnull] + list(args)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env)
        ct._LIVE.add(self.proc)
        testcase.addCleanup(self.cleanup)
        deadline = time.monotonic() + ct.STARTUP_TIMEOUT
        while not os.path.exists(self.socket_path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("systemd-socket-activate did not listen\n" + self.log_text())
            time.sleep(0.02)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def cli(self, *args, **kw):
        return ct.run_cli(*args, socket=self.socket_path, **kw)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(ct.STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("cairnd did not exit after SIGTERM\n" + self.log_text())
        ct._LIVE.discard(self.proc)
        if rc != 0:
            raise AssertionError("cairnd exited with %d after SIGTERM\n%s" % (rc, self.log_text()))

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        ct._LIVE.discard(self.proc)


def open_path_for_others(testcase, path):
    """o+x on our ancestors of `path` (restored afterwards) and the socket
    0666, so that only SO_PEERCRED can refuse another uid."""
    d = os.path.dirname(path)
    while d not in ("/", ""):
        st = os.stat(d)
        if st.st_uid == os.getuid() and not st.st_mode & stat.S_IXOTH:
            os.chmod(d, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
            testcase.addCleanup(os.chmod, d, stat.S_IMODE(st.st_mode))
        d = os.path.dirname(d)
    os.chmod(path, 0o666)


def connect_as_nobody(path):
    """Connects as uid nobody, sends a status request; returns 'closed'
    (the daemon hung up without a reply), 'answered', 'unreachable' or
    'timeout'."""
    pid = os.fork()
    if pid == 0:  # child: never return into unittest
        code = 99
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20 * ct.SLOW)
            try:
                s.connect(path)
            except OSError:
                os._exit(20)
            try:
                s.sendall(ct.frame({"id": 1, "op": "status"}))
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                code = 0 if s.recv(4096) == b"" else 10
            except ConnectionResetError:
                code = 0
            except socket.timeout:
                code = 30
        except BaseException:
            code = 98
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return {0: "closed", 10: "answered", 20: "unreachable", 30: "timeout"}.get(code, code)


class SocketActivation(unittest.TestCase):
    def test_add_and_get_on_the_socket_from_systemd(self):
        a = Activated(self)
        content = b"handed over by systemd\n" * 100
        h = ct.parse_add(a.cli("add", "-", input=content).stdout)[0][0]
        self.assertEqual(a.cli("get", h).stdout, content)
        with ct.Conn(a.socket_path) as c:
            r = c.add(os.urandom(3 * ct.MiB))
            self.assertIs(r.get("ok"), True, ct.short(r))
            st = c.call("status")
            self.assertEqual(st["pid"], a.proc.pid)  # cairnd replaced systemd-socket-activate
        log = a.log_text()
        self.assertIn("listening on %s (socket from systemd)" % a.socket_path, log)
        self.assertFalse(os.path.exists(a.flag_socket), "cairnd bound --socket as well")
        a.stop()
        # the path is the socket unit's: cairnd leaves it in place
        self.assertTrue(stat.S_ISSOCK(os.lstat(a.socket_path).st_mode))

    def test_peer_uid_is_checked_on_the_socket_from_systemd(self):
        if os.getuid() != 0:
            self.skipTest("needs root to setuid() to nobody")
        a = Activated(self)
        a.cli("status")  # the first connection starts cairnd
        open_path_for_others(self, a.socket_path)
        outcome = connect_as_nobody(a.socket_path)
        self.assertEqual(outcome, "closed", "a client of uid nobody: %s\n%s" % (outcome, a.log_text()))
        self.assertIn("refused a connection from uid %d" % NOBODY, a.log_text())
        a.cli("status")  # our own uid is still served
        a.stop()

    def spawn_with_fds(self, fds, base, **kw):
        """Starts cairnd with the fds at 3, 4, ... and LISTEN_FDS/LISTEN_PID
        saying so, as systemd does (the fds are closed here)."""
        high = []
        for f in fds:  # out of the way of 3, 4, ... (free fds from 100 up)
            high.append(fcntl.fcntl(f, fcntl.F_DUPFD, 100))
            os.close(f)
        moves = " ".join("%d<&%d %d<&-" % (3 + i, h, h) for i, h in enumerate(high))
        script = 'exec %s; export LISTEN_PID=$$ LISTEN_FDS=%d; exec "$@"' % (moves, len(fds))
        cmd = ["bash", "-c", script, "bash", ct.CAIRND, "--socket", os.path.join(base, "run", "s.sock"),
               "--data-dir", os.path.join(base, "data"), "--config", os.devnull]
        try:
            return subprocess.Popen(cmd, pass_fds=high, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
        finally:
            for h in high:
                os.close(h)

    def run_with_fds(self, make_fds):
        """Runs cairnd with the fds make_fds() returns; returns (exit status, output)."""
        base = ct.make_tempdir(self)
        p = self.spawn_with_fds(make_fds(base), base)
        try:
            out, _ = p.communicate(timeout=ct.STARTUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            raise AssertionError("cairnd kept running with a bad fd\n" + out.decode("utf-8", "replace"))
        self.assertFalse(os.path.exists(os.path.join(base, "run", "s.sock")), "cairnd bound --socket")
        return p.returncode, out.decode("utf-8", "replace")

    def assert_refused(self, make_fds, *words):
        rc, out = self.run_with_fds(make_fds)
        self.assertEqual(rc, 1, out)
        for w in words:
            self.assertIn(w, out)

    def test_a_unix_stream_socket_that_does_not_listen_is_refused(self):
        def fds(base):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(base, "x.sock"))
            return [s.detach()]
        self.assert_refused(fds, "the socket systemd passed (fd 3) is not listening", "Accept=no")

    def test_a_datagram_socket_is_refused(self):
        def fds(base):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(os.path.join(base, "x.sock"))
            return [s.detach()]
        self.assert_refused(fds, "(fd 3) is not a stream socket")

    def test_a_tcp_socket_is_refused(self):
        def fds(base):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen()
            return [s.detach()]
        self.assert_refused(fds, "(fd 3) is an AF_INET socket, not AF_UNIX")

    def test_a_file_is_refused(self):
        def fds(base):
            return [os.open(os.path.join(base, "file"), os.O_CREAT | os.O_RDWR, 0o600)]
        self.assert_refused(fds, "(fd 3) is not a socket")

    def test_two_sockets_are_refused(self):
        def fds(base):
            out = []
            for name in ("a.sock", "b.sock"):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(os.path.join(base, name))
                s.listen()
                out.append(s.detach())
            return out
        self.assert_refused(fds, "systemd passed 2 sockets; cairnd listens on exactly one")

    def test_a_listening_socket_passed_by_hand_is_served(self):
        """The same protocol without systemd-socket-activate: the fd is taken as is."""
        base = ct.make_tempdir(self)
        path = os.path.join(base, "given.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen()
        p = self.spawn_with_fds([s.detach()], base)
        ct._LIVE.add(p)
        try:
            with ct.Conn(path) as c:  # queued in the backlog until cairnd accepts
                r = c.call("status", timeout=ct.STARTUP_TIMEOUT)
            self.assertIs(r.get("ok"), True, ct.short(r))
            self.assertEqual(r["pid"], p.pid)
        finally:
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=ct.STOP_TIMEOUT)
            ct._LIVE.discard(p)
        out = out.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("listening on %s (socket from systemd)" % path, out)


class Notify(unittest.TestCase):
    def start(self, env=None, activated=False):
        self.rx = NotifyReceiver(self)
        env = dict({"NOTIFY_SOCKET": self.rx.path}, **(env or {}))
        if activated:
            a = Activated(self, env=env)
            a.cli("status")
            return a
        d = ct.Daemon(self, env=env)
        d.start()
        return d

    def test_ready_status_stopping(self):
        d = self.start()
        self.rx.wait_for(lambda l: l == "READY=1", what="READY=1")
        lines = [l for _, l in self.rx.assignments()]
        ready = lines.index("READY=1")
        self.assertIn("STATUS=replaying packs", lines[:ready])
        self.assertIn("STATUS=serving 0 connections", lines[ready:ready + 2],
                      "READY=1 comes with the status")
        self.assertNotIn("STOPPING=1", lines)
        self.assertNotIn("WATCHDOG=1", lines, "a watchdog without WATCHDOG_USEC")
        # connections kept open show in the status (brought up to date every second)
        conns = [d.connect() for _ in range(3)]
        for c in conns:
            c.call("status")
        t3, _ = self.rx.wait_for(lambda l: l == "STATUS=serving 3 connections",
                                 timeout=10 * ct.SLOW, what="STATUS=serving 3 connections")
        for c in conns:
            c.close()
        self.rx.wait_for(lambda l: l == "STATUS=serving 0 connections", timeout=10 * ct.SLOW,
                         what="STATUS=serving 0 connections again", after=t3)
        d.stop()
        lines = [l for _, l in self.rx.assignments()]
        self.assertIn("STOPPING=1", lines)
        stopping = lines.index("STOPPING=1")
        self.assertTrue(any(l.startswith("STATUS=stopping") for l in lines[stopping:]), lines)
        self.assertEqual(lines.count("READY=1"), 1, lines)

    def test_ready_after_socket_activation(self):
        a = self.start(activated=True)
        self.rx.wait_for(lambda l: l == "READY=1", what="READY=1")
        a.stop()
        lines = [l for _, l in self.rx.assignments()]
        self.assertIn("STOPPING=1", lines)

    def test_watchdog(self):
        d = self.start(env={"WATCHDOG_USEC": "200000"})
        self.rx.wait_for(lambda l: l == "READY=1", what="READY=1")
        time.sleep(1.5)
        pings = [t for t, l in self.rx.assignments() if l == "WATCHDOG=1"]
        # every 100 ms: 15 in 1.5 s; a loaded (or sanitized) machine may lose a few
        self.assertGreaterEqual(len(pings), 8, "WATCHDOG=1 %d times in 1.5 s" % len(pings))
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        self.assertLess(max(gaps), 0.2 * ct.SLOW, "a gap of %.3f s between pings" % max(gaps))
        d.stop()

    def test_no_watchdog_for_another_pid(self):
        d = self.start(env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
        self.rx.wait_for(lambda l: l == "READY=1", what="READY=1")
        time.sleep(0.6)
        self.assertNotIn("WATCHDOG=1", [l for _, l in self.rx.assignments()])
        d.stop()

    def test_an_unreachable_notify_socket_changes_nothing(self):
        d = ct.Daemon(self, env={"NOTIFY_SOCKET": "/nonexistent/notify", "WATCHDOG_USEC": "200000"})
        d.start()
        d.assert_healthy()
        d.stop()


class JournalPriority(unittest.TestCase):
    def journal_env(self, path):
        st = os.stat(path)
        return {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}

    def test_every_line_has_its_priority(self):
        d = ct.Daemon(self)
        open(d.log_path, "ab").close()
        d.extra_env = self.journal_env(d.log_path)
        d.start()
        d.assert_healthy()
        d.stop()
        lines = [l for l in d.log_text().splitlines() if not l.startswith("=== start")]
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, r"^<[3467]>", "a line without its priority")
        self.assertTrue(any(l.startswith("<6>cairnd ") and "listening on" in l for l in lines), lines)

    def run_failing(self, args, env):
        base = ct.make_tempdir(self)
        out = os.path.join(base, "err")
        with open(out, "wb") as f:
            env = dict(os.environ, **self.journal_env(out)) if env == "journal" else \
                dict(os.environ, JOURNAL_STREAM="1:2")
            rc = subprocess.call([ct.CAIRND] + args, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                 env=env, timeout=ct.STARTUP_TIMEOUT)
        with open(out) as f:
            return rc, f.read().splitlines()

    def test_start_up_failures_have_their_priority(self):
        rc, lines = self.run_failing(["--no-such-flag"], "journal")
        self.assertEqual(rc, 2)
        self.assertTrue(lines)
        for l in lines:
            self.assertTrue(l.startswith("<3>"), lines)
        base = ct.make_tempdir(self)
        blocker = os.path.join(base, "file")
        open(blocker, "w").close()
        rc, lines = self.run_failing(["--config", os.devnull, "--data-dir", os.path.join(blocker, "d"),
                                      "--socket", os.path.join(base, "s.sock")], "journal")
        self.assertEqual(rc, 1)
        self.assertTrue(lines)
        for l in lines:
            self.assertTrue(l.startswith("<3>"), lines)

    def test_no_priorities_when_stderr_is_not_the_journal(self):
        rc, lines = self.run_failing(["--no-such-flag"], "other")
        self.assertEqual(rc, 2)
        # Stamped with the time, since stderr is a pipe here.
        self.assertRegex(lines[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z cairnd: ")
        self.assertFalse(any(l.startswith("<") for l in lines), lines)


class Units(unittest.TestCase):
    def units(self, kind):
        """The generated units of `kind`, copied to a temp dir with
        ExecStart= pointing at the cairnd under test (verify wants it to exist)."""
        src = os.path.join(UNITS, kind)
        if not os.path.isfile(os.path.join(src, "cairnd.service")):
            self.skipTest("no generated units in %s (set CAIRN_SYSTEMD_UNITS)" % src)
        dst = os.path.join(ct.make_tempdir(self), kind)
        os.mkdir(dst)
        for name in ("cairnd.service", "cairnd.socket"):
            with open(os.path.join(src, name)) as f:
                text = f.read()
            self.assertIsNone(re.search(r"@[a-z_]+@", text),
                              "an unsubstituted @VAR@ in %s/%s" % (kind, name))
            text = re.sub(r"^ExecStart=\S*/cairnd\b", "ExecStart=" + ct.CAIRND, text, flags=re.M)
            with open(os.path.join(dst, name), "w") as f:
                f.write(text)
        return dst

    def analyze(self, args, cwd, user=False):
        if ANALYZE is None:
            self.skipTest("systemd-analyze not installed (Debian package systemd)")
        env = dict(os.environ)
        if user:
            env.setdefault("XDG_RUNTIME_DIR", ct.make_tempdir(self, "cairn-xdg-"))
            args = ["--user"] + args
        p = subprocess.run([ANALYZE] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        if p.returncode != 0 and "Failed to initialize manager" in err:
            self.skipTest("systemd-analyze cannot run here: %s" % err.strip().splitlines()[-1])
        return p.returncode, p.stdout.decode("utf-8", "replace"), err

    def verify(self, kind):
        d = self.units(kind)
        rc, out, err = self.analyze(["verify", "--man=no", "./cairnd.service", "./cairnd.socket"],
                                    d, user=kind == "user")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(err.strip(), "", "systemd-analyze verify complained")

    def test_verify_system_units(self):
        self.verify("system")

    def test_verify_user_units(self):
        self.verify("user")

    def test_system_service_exposure(self):
        d = self.units("system")
        rc, out, err = self.analyze(["--help"], d)
        if "--offline" not in out:
            self.skipTest("this systemd-analyze has no --offline (systemd < 250)")
        rc, out, err = self.analyze(["security", "--offline=true", "--no-pager", "./cairnd.service"], d)
        m = re.search(r"Overall exposure level for cairnd\.service: (\d+\.\d)", out + err)
        self.assertIsNotNone(m, out + err)
        self.assertLessEqual(float(m.group(1)), 3.0, out)

    def test_units_match_the_daemon(self):
        """The socket units listen where the services tell cairnd to."""
        for kind in ("system", "user"):
            src = os.path.join(UNITS, kind)
            if not os.path.isfile(os.path.join(src, "cairnd.service")):
                self.skipTest("no generated units in %s" % src)
            with open(os.path.join(src, "cairnd.service")) as f:
                service = f.read()
            with open(os.path.join(src, "cairnd.socket")) as f:
                sock = f.read()
            listen = re.search(r"^ListenStream=(\S+)$", sock, re.M).group(1)
            self.assertIn("--socket %s" % listen, service)
            self.assertIn("Type=notify", service)
            self.assertRegex(service, r"(?m)^WatchdogSec=")


if __name__ == "__main__":
    ct.main()
