#!/usr/bin/env python3
"""Security on a shared machine (issue 30): the real cairn and cairnd run as
a victim uid while an attacker uid prepares the ground, each through
`setpriv --reuid --regid --clear-groups` (the tests need root; numeric uids
with no account, so nothing is added to the system).

  SocketDirectory  cairnd refuses a socket directory another user owns or
                   others may write (the default /tmp/cairn-$UID made 0777
                   by the attacker, a configured one), and so does cairn,
                   before a byte is sent; a sticky directory of root (/tmp)
                   is fine
  Peer             cairn refuses a daemon of another uid (SO_PEERCRED):
                   an attacker's fake cairnd is sent nothing
  Integrity        content received for a full-hash ref must hash to it:
                   `integrity`, exit 1, no output file
  DataDirectory    without HOME the data directory is below the user
                   database's home, never /tmp; one another user owns or
                   may write is refused; links where cairnd opens its files
                   (cairnd.lock, cairn.db) are refused and never followed
  Modes            with umask 000 everything cairnd makes is 0700 / 0600
                   (data directory, SQLite's files, packs of local:/PATH),
                   and the attacker can read none of it
  SftpModes        on an SFTP server the store is 0700 / 0600, and so is the
                   local read cache
  Secrets          a secret in the URL of a config file others may read, or
                   on cairnd's command line (/proc/PID/cmdline), is refused
  Output           get -r never follows a symbolic link planted in DIR;
                   get -o refuses a FIFO of another user
  McpAdd           cairn mcp's add {path} reads no file without --allow-path,
                   then only regular files below those directories (no
                   ~/.ssh key, /proc/self/environ, FIFO, device or link out)
  Hygiene          no core dumps; no password in an sftp URL; control
                   characters from outside never forge a log line
  McpMemory        one MCP request line of millions of values is refused
                   before it is parsed, under 100 MiB
  (test_connections.py: the connection limit, client_timeout, connection
  memory; the daemon's own clients, so one uid is enough)
  SftpHostKey      a host known_hosts has a key of is refused when it offers
                   a key of another type, accept_new_host=1 or not, hashed
                   entry or plain
"""
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fakecairnd.py")
VICTIM = 61301
ATTACKER = 61302
TIMEOUT = 60 * ct.SLOW


def as_uid(uid, argv):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "--"] + argv


def sha(data):
    return hashlib.sha256(data).hexdigest()


class TwoUsers(unittest.TestCase):
    """A base directory everyone may traverse, with a home for the victim
    (0700, its own), one for the attacker, and `shared`, root's and sticky
    like /tmp."""

    def setUp(self):
        if os.getuid() != 0:
            self.skipTest("needs root to run as two other uids")
        if not shutil.which("setpriv"):
            self.skipTest("needs setpriv (util-linux)")
        for exe in (ct.CAIRN, ct.CAIRND):
            if not os.access(exe, os.X_OK):
                self.skipTest("missing %s" % exe)
        self.base = ct.make_tempdir(self, prefix="cairn-sec-")
        os.chmod(self.base, 0o711)
        self.open_ancestors(self.base)
        self.open_ancestors(ct.CAIRND)
        self.open_ancestors(ct.CAIRN)
        self.open_ancestors(FAKE)
        self.home = self.user_dir("victim", VICTIM)
        self.attacker_home = self.user_dir("attacker", ATTACKER)
        self.shared = os.path.join(self.base, "shared")
        os.mkdir(self.shared)
        os.chmod(self.shared, 0o1777)
        self.procs = []
        self.addCleanup(self.kill_strays)

    def kill_strays(self):
        """Kills what a test's uids still run (a daemon that cairn autostarted, when
        a check failed): those uids are this test's alone."""
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and os.stat("/proc/" + pid).st_uid in (VICTIM, ATTACKER):
                    os.kill(int(pid), 9)
            except OSError:
                pass

    def open_ancestors(self, path):
        """o+x on the directories above `path` that lack it (restored afterwards)."""
        d = os.path.dirname(os.path.abspath(path))
        while d not in ("/", ""):
            st = os.stat(d)
            if not st.st_mode & stat.S_IXOTH:
                os.chmod(d, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
                self.addCleanup(os.chmod, d, stat.S_IMODE(st.st_mode))
            d = os.path.dirname(d)

    def user_dir(self, name, uid, mode=0o700, parent=None):
        path = os.path.join(parent or self.base, name)
        os.mkdir(path)
        os.chown(path, uid, uid)
        os.chmod(path, mode)
        return path

    def env(self, **extra):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
               "CAIRND": ct.CAIRND}
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def run_as(self, uid, argv, env=None, input=None, umask=None):
        pre = (lambda: os.umask(umask)) if umask is not None else None
        return subprocess.run(as_uid(uid, argv), env=env or self.env(), input=input,
                              capture_output=True, timeout=TIMEOUT, preexec_fn=pre)

    def cairn(self, *args, env=None, input=None):
        return self.run_as(VICTIM, [ct.CAIRN] + list(args), env=env, input=input)

    def start_as(self, uid, argv, env=None, umask=None):
        pre = (lambda: os.umask(umask)) if umask is not None else None
        log = open(os.path.join(self.base, "proc-%d.log" % len(self.procs)), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen(as_uid(uid, argv), env=env or self.env(), stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, preexec_fn=pre)
        self.procs.append(p)
        self.addCleanup(self.kill, p)
        return p

    def kill(self, p):
        if p.poll() is None:
            p.kill()
        p.wait()

    def stop(self, p):
        p.terminate()
        self.assertEqual(p.wait(TIMEOUT), 0)

    def wait_for(self, path, p=None):
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(path):
            if p is not None and p.poll() is not None:
                self.fail("process exited with %d before %s appeared" % (p.returncode, path))
            if time.monotonic() > deadline:
                self.fail("%s did not appear" % path)
            time.sleep(0.02)

    def fake_daemon(self, uid, socket_path, content=None):
        """fakecairnd.py as `uid` on socket_path; returns the path of its log."""
        logdir = self.user_dir("fake-%d" % len(self.procs), uid, 0o755)
        log = os.path.join(logdir, "log")
        argv = [sys.executable, FAKE, socket_path, log]
        if content is not None:
            cfile = os.path.join(logdir, "content")
            with open(cfile, "wb") as f:
                f.write(content)
            os.chmod(cfile, 0o644)
            argv.append(cfile)
        p = self.start_as(uid, argv)
        self.wait_for(log, p)
        return log

    def fake_log(self, log):
        with open(log) as f:
            return f.read().split("\n")

    def victim_daemon(self, socket_path, data_dir, *args, umask=None):
        return self.start_as(VICTIM, [ct.CAIRND, "--socket", socket_path, "--data-dir", data_dir]
                             + list(args), umask=umask)

    def assert_refused(self, p, *needles):
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        for n in needles:
            self.assertIn(n, text)
        return text


class SocketDirectory(TwoUsers):
    def test_daemon_refuses_a_socket_directory_of_another_user(self):
        evil = self.user_dir("sock", ATTACKER, 0o777, parent=self.shared)
        p = self.run_as(VICTIM, [ct.CAIRND, "--socket", os.path.join(evil, "cairnd.sock"),
                                 "--data-dir", os.path.join(self.home, "data")])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_refused(p, "refusing the socket directory", "belongs to uid %d" % ATTACKER)
        self.assertEqual(os.listdir(evil), [])

    def test_daemon_refuses_its_own_socket_directory_others_may_write(self):
        for mode, who in ((0o777, "others"), (0o770, "its group")):
            d = os.path.join(self.home, "run-%o" % mode)
            self.user_dir(os.path.basename(d), VICTIM, mode, parent=self.home)
            p = self.run_as(VICTIM, [ct.CAIRND, "--socket", os.path.join(d, "cairnd.sock"),
                                     "--data-dir", os.path.join(self.home, "data")])
            self.assert_refused(p, "refusing the socket directory", "writable by " + who)
            self.assertEqual(os.listdir(d), [])

    def test_default_socket_directory_made_by_the_attacker(self):
        # No XDG_RUNTIME_DIR (su, cron, containers): /tmp/cairn-$UID.
        default = "/tmp/cairn-%d" % VICTIM
        shutil.rmtree(default, ignore_errors=True)
        self.addCleanup(shutil.rmtree, default, True)
        p = self.run_as(ATTACKER, ["mkdir", "-m", "0777", default])
        self.assertEqual(p.returncode, 0, p.stderr)
        secret = os.path.join(self.home, "secret")
        with open(secret, "wb") as f:
            f.write(b"the victim's secret\n")
        os.chown(secret, VICTIM, VICTIM)
        # cairn refuses it before starting anything ...
        p = self.cairn("add", secret)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assert_refused(p, "refusing the socket directory: %s" % default,
                            "belongs to uid %d" % ATTACKER)
        # ... and so does cairnd
        p = self.run_as(VICTIM, [ct.CAIRND, "--data-dir", os.path.join(self.home, "data")])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_refused(p, "refusing the socket directory: %s" % default)
        self.assertEqual(os.listdir(default), [])

    def test_client_refuses_a_socket_directory_of_another_user(self):
        evil = self.user_dir("sock", ATTACKER, 0o777, parent=self.shared)
        sock = os.path.join(evil, "cairnd.sock")
        log = self.fake_daemon(ATTACKER, sock)
        p = self.cairn("--no-autostart", "--socket", sock, "add", "-", input=b"secret")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assert_refused(p, "refusing the socket directory")
        self.assertNotIn("connect", self.fake_log(log))

    def test_a_sticky_directory_of_root_is_fine(self):
        # Like /tmp: nobody else can rename or remove the victim's socket there.
        sock = os.path.join(self.shared, "victim.sock")
        d = self.victim_daemon(sock, os.path.join(self.home, "data"))
        self.wait_for(sock, d)
        p = self.cairn("--no-autostart", "--socket", sock, "add", "-n", "doc", "-",
                       input=b"hello")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cairn("--no-autostart", "--socket", sock, "get", "doc")
        self.assertEqual((p.returncode, p.stdout), (0, b"hello"), p.stderr)
        self.stop(d)


class Peer(TwoUsers):
    def test_client_refuses_a_daemon_of_another_uid(self):
        # In a directory that passes (root's, sticky), the attacker's own socket, open to all.
        sock = os.path.join(self.shared, "evil.sock")
        log = self.fake_daemon(ATTACKER, sock, content=b"echo pwned\n")
        bashrc = os.path.join(self.home, ".bashrc")
        with open(bashrc, "wb") as f:
            f.write(b"# mine\n")
        os.chown(bashrc, VICTIM, VICTIM)
        p = self.cairn("--no-autostart", "--socket", sock, "add", "-", input=b"secret")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assert_refused(p, "refusing the daemon on %s" % sock, "uid %d" % ATTACKER)
        p = self.cairn("--socket", sock, "get", "-o", bashrc, "x" * 8)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assert_refused(p, "refusing the daemon on %s" % sock)
        with open(bashrc, "rb") as f:
            self.assertEqual(f.read(), b"# mine\n")
        # It saw the connections, and not one frame.
        lines = self.fake_log(log)
        self.assertIn("connect", lines)
        self.assertFalse([ln for ln in lines if ln.startswith("frame")], lines)


    def test_a_root_daemon_refusing_the_client_is_named(self):
        # The client lets a daemon of root through; the daemon serves only its own uid.
        sock_dir = self.user_dir("root-run", 0, 0o755)
        sock = os.path.join(sock_dir, "cairnd.sock")
        data = self.user_dir("root-data", 0, 0o700)
        d = self.start_as(0, [ct.CAIRND, "--socket", sock, "--data-dir", data])
        self.wait_for(sock, d)
        p = self.cairn("--no-autostart", "--socket", sock, "status")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.decode(),
                         "cairn: cannot connect to cairnd at %s: the socket belongs to another "
                         "user (uid 0), and this is uid %d: Permission denied\n" % (sock, VICTIM))
        os.chmod(sock, 0o666)  # as a system socket open to a group would be
        p = self.cairn("--no-autostart", "--socket", sock, "status")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.decode(),
                         "cairn: cairnd closed the connection: the socket %s belongs to a daemon "
                         "of another user (uid 0), which serves only its own (this is uid %d)\n"
                         % (sock, VICTIM))
        p = self.cairn("--no-autostart", "--socket", sock, "--json", "status")
        self.assertEqual(json.loads(p.stdout)["error"]["code"], "refused", p.stdout)
        self.stop(d)


class Integrity(TwoUsers):
    """A daemon of the victim's own uid that lies (broken, or the attacker's
    socket reached some other way): a get by full hash checks the bytes."""

    def fake(self, content):
        sock = os.path.join(self.home, "run-%d" % len(self.procs), "cairnd.sock")
        self.user_dir(os.path.basename(os.path.dirname(sock)), VICTIM, parent=self.home)
        self.fake_daemon(VICTIM, sock, content)
        return sock

    def test_content_must_hash_to_a_full_hash_ref(self):
        wanted = b"the real document\n"
        for lie in (b"echo pwned\n", os.urandom(3 * ct.MAX_DATA + 5)):
            sock = self.fake(lie)
            out = os.path.join(self.home, "out-%d" % len(lie))
            for ref in (sha(wanted), sha(wanted).upper()):
                p = self.cairn("--socket", sock, "get", "-o", out, ref)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assert_refused(p, "integrity", "does not hash to")
                self.assertEqual(sorted(os.listdir(self.home)),
                                 sorted(n for n in os.listdir(self.home) if n.startswith("run-")),
                                 "an output file was left")
            p = self.cairn("--socket", sock, "get", sha(wanted))
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assert_refused(p, "integrity")
            if len(lie) <= ct.MAX_DATA:
                self.assertEqual(p.stdout, b"", "a one-frame document that fails is not written")

    def test_honest_content_and_names_pass(self):
        wanted = b"the real document\n"
        sock = self.fake(wanted)
        out = os.path.join(self.home, "out")
        p = self.cairn("--socket", sock, "get", "-o", out, sha(wanted))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), wanted)
        # A name names no content: nothing to check it against.
        p = self.cairn("--socket", sock, "get", "some-name")
        self.assertEqual((p.returncode, p.stdout), (0, wanted), p.stderr)


class DataDirectory(TwoUsers):
    def test_without_home_the_user_database_says_where(self):
        nobody = pwd.getpwuid(65534)
        p = self.run_as(65534, [ct.CAIRND, "--print-config"], env=self.env(HOME=None))
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        self.assertIn("data_dir = %s/.local/share/cairn\n" % nobody.pw_dir, out)
        self.assertNotIn("/tmp/.local", out)
        # A uid with no home at all is told to name one.
        try:
            pwd.getpwuid(VICTIM)
            self.skipTest("uid %d has an account here" % VICTIM)
        except KeyError:
            pass
        p = self.run_as(VICTIM, [ct.CAIRND, "--socket", os.path.join(self.home, "s")],
                        env=self.env(HOME=None))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_refused(p, "no data directory", "--data-dir")
        self.assertFalse(os.path.exists("/tmp/.local/share/cairn/cairnd.lock")
                         and os.stat("/tmp/.local/share/cairn/cairnd.lock").st_uid == VICTIM)

    def test_refuses_a_data_directory_of_another_user_or_open_to_writes(self):
        sock = os.path.join(self.home, "run", "cairnd.sock")
        cases = [(self.user_dir("data-a", ATTACKER, 0o777, parent=self.shared),
                  "belongs to uid %d" % ATTACKER),
                 (self.user_dir("data-b", ATTACKER, 0o755, parent=self.shared),
                  "belongs to uid %d" % ATTACKER),
                 (self.user_dir("data-c", VICTIM, 0o777, parent=self.shared),
                  "writable by others"),
                 (self.user_dir("data-d", VICTIM, 0o775, parent=self.home), "writable by its group")]
        for data, why in cases:
            p = self.run_as(VICTIM, [ct.CAIRND, "--socket", sock, "--data-dir", data])
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assert_refused(p, "refusing the data directory", why)
            self.assertFalse(os.path.exists(os.path.join(data, "cairnd.lock")))
        # Readable by others, but only its user may write: used.
        data = self.user_dir("data-e", VICTIM, 0o755, parent=self.home)
        d = self.victim_daemon(sock, data)
        self.wait_for(sock, d)
        self.stop(d)

    def test_links_where_cairnd_opens_its_files_are_refused(self):
        precious = os.path.join(self.home, "precious")
        sock = os.path.join(self.home, "run", "cairnd.sock")
        for name in ("cairnd.lock", "cairn.db"):
            for kind in ("symlink", "hardlink"):
                with open(precious, "wb") as f:
                    f.write(b"keep me\n")
                os.chown(precious, VICTIM, VICTIM)
                data = self.user_dir("data-%s-%s" % (name, kind), VICTIM, parent=self.home)
                (os.symlink if kind == "symlink" else os.link)(precious,
                                                               os.path.join(data, name))
                p = self.run_as(VICTIM, [ct.CAIRND, "--socket", sock, "--data-dir", data])
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assert_refused(p, "refusing %s/%s" % (data, name))
                with open(precious, "rb") as f:
                    self.assertEqual(f.read(), b"keep me\n", "%s %s followed" % (name, kind))


def walk_modes(root):
    """The directories under root (itself included) that are not 0700, and the files not 0600."""
    bad = []
    for dirpath, dirs, files in os.walk(root):
        st = os.lstat(dirpath)
        if stat.S_IMODE(st.st_mode) != 0o700:
            bad.append((dirpath, oct(stat.S_IMODE(st.st_mode))))
        for n in files:
            st = os.lstat(os.path.join(dirpath, n))
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o600:
                bad.append((os.path.join(dirpath, n), oct(stat.S_IMODE(st.st_mode))))
    return bad


class Modes(TwoUsers):
    def test_everything_private_whatever_the_umask(self):
        # Both in the shared directory, where the attacker can reach them by name.
        data = os.path.join(self.shared, "victim-data", "deep")
        store = os.path.join(self.shared, "victim-store", "packs-here")
        sock = os.path.join(self.home, "run", "cairnd.sock")
        d = self.victim_daemon(sock, data, "--backend", "local:" + store, umask=0)
        self.wait_for(sock, d)
        docs = {}
        for i in range(5):
            content = os.urandom(5000) + b"%d" % i
            p = self.cairn("--socket", sock, "add", "-n", "doc%d" % i, "-", input=content)
            self.assertEqual(p.returncode, 0, p.stderr)
            docs["doc%d" % i] = content
        names = set(os.listdir(data))
        for wanted in ("cairn.db", "cairn.db-wal", "cairn.db-shm", "cairnd.lock", "writer"):
            self.assertIn(wanted, names)
        packs = [os.path.join(dp, n) for dp, _, fs in os.walk(store) for n in fs]
        self.assertTrue(packs)
        # While it runs (the -wal and -shm files exist) and after it stopped.
        for when in ("running", "stopped"):
            bad = walk_modes(os.path.join(self.shared, "victim-data")) \
                + walk_modes(os.path.join(self.shared, "victim-store"))
            self.assertEqual(bad, [], when)
            for path in packs + [os.path.join(data, "cairn.db")]:
                p = self.run_as(ATTACKER, ["cat", path])
                self.assertNotEqual(p.returncode, 0, "the attacker read %s" % path)
            if when == "running":
                self.stop(d)
        # It still reads back.
        d = self.victim_daemon(sock, data, "--backend", "local:" + store, umask=0)
        self.wait_for(sock, d)
        p = self.cairn("--socket", sock, "get", "doc3")
        self.assertEqual((p.returncode, p.stdout), (0, docs["doc3"]), p.stderr)
        self.stop(d)


class SftpModes(unittest.TestCase):
    def start_umask0(self, d):
        old = os.umask(0)
        try:
            d.start()
        finally:
            os.umask(old)

    def test_server_store_and_read_cache_are_private(self):
        import sshfixture
        sshfixture.require_tools()
        base = ct.make_tempdir(self, prefix="cairn-sec-sftp-")
        srv = sshfixture.SshServer(os.path.join(base, "ssh"))
        self.addCleanup(srv.stop)
        srv.start()
        remote = os.path.join(base, "remote", "store")
        dbase = os.path.join(base, "d")
        os.makedirs(dbase)
        d = ct.Daemon(self, base=dbase, args=["--backend", srv.url(remote)])
        self.start_umask0(d)
        docs = {}
        with d.connect() as c:
            for i in range(3):
                content = os.urandom(20000) + b"%d" % i
                r = c.add(content, name="doc%d" % i)
                self.assertIs(r.get("ok"), True, r)
                docs[r["hash"]] = content
        d.stop()
        self.start_umask0(d)  # a new daemon reads through the read cache
        with d.connect() as c:
            for h, content in docs.items():
                _, got = c.get(h)
                self.assertEqual(got, content)
        self.assertEqual(walk_modes(os.path.join(base, "remote")), [])
        cache = os.path.join(d.data_dir, "read-cache")
        self.assertTrue(os.path.isdir(cache))
        cached = [n for _, _, fs in os.walk(cache) for n in fs]
        self.assertTrue(cached, "nothing in the read cache")
        self.assertEqual(walk_modes(d.data_dir), [])
        d.stop()


class SftpHostKey(ct.StoreChecks, unittest.TestCase):
    """A machine in the middle offers a host key of another type than the
    one known_hosts holds for the host: refused even with accept_new_host=1,
    whether the entry is hashed (Debian's HashKnownHosts yes) or plain."""
    STARTUP_REFUSAL_TIMEOUT = 60 * ct.SLOW

    def check(self, hashed):
        import sshfixture
        sshfixture.require_tools()
        base = ct.make_tempdir(self, prefix="cairn-sec-hk-")
        srv = sshfixture.SshServer(os.path.join(base, "ssh"))
        self.addCleanup(srv.stop)
        srv.start()  # known_hosts: its ed25519 key
        if hashed:
            p = subprocess.run(["ssh-keygen", "-H", "-f", srv.known_hosts], capture_output=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(srv.known_hosts) as f:
                self.assertNotIn(srv.host, f.read())
        with open(srv.known_hosts, "rb") as f:
            before = f.read()
        srv.stop()
        other = os.path.join(base, "ssh", "host_ecdsa")
        p = subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", other],
                           capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        srv.host_key = other
        srv.start(write_known_hosts=False)
        d = ct.Daemon(self, base=os.path.join(base, "d"),
                      args=["--backend", srv.url(os.path.join(base, "remote"),
                                                 accept_new_host=1)])
        os.makedirs(d.base)
        out = self.assert_start_refused(d, "host key", "handshake")
        self.assertNotIn("recorded the new host key", out)
        with open(srv.known_hosts, "rb") as f:
            self.assertEqual(f.read(), before, "known_hosts changed")
        return out

    def test_hashed_entry_of_another_type(self):
        out = self.check(hashed=True)
        self.assertIn("host key of another type", out)

    def test_plain_entry_of_another_type(self):
        self.check(hashed=False)


class Secrets(TwoUsers):
    SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"

    def conf(self, mode, url):
        path = os.path.join(self.home, "cairn-%o.conf" % mode)
        with open(path, "w") as f:
            f.write("[backend]\nurl = %s\n" % url)
        os.chown(path, VICTIM, VICTIM)
        os.chmod(path, mode)
        return path

    def print_config(self, *args):
        return self.run_as(VICTIM, [ct.CAIRND, "--data-dir", os.path.join(self.home, "data")]
                           + list(args) + ["--print-config"])

    def test_a_secret_in_the_url_of_a_readable_config_file(self):
        for key in ("secret_access_key", "session_token", "api_token"):
            url = "s3://bucket/p?region=x&%s=%s" % (key, self.SECRET)
            conf = self.conf(0o644, url)
            p = self.print_config("--config", conf)
            self.assertEqual(p.returncode, 1, p.stdout)
            text = self.assert_refused(p, conf, "holds a secret", "chmod 600")
            self.assertNotIn(self.SECRET, text)
            os.chmod(conf, 0o600)
            p = self.print_config("--config", conf)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn(self.SECRET, (p.stdout + p.stderr).decode())

    def test_no_secret_on_the_command_line(self):
        # /proc/PID/cmdline: the attacker reads any process's arguments.
        for key in ("secret_access_key", "session_token", "api_token"):
            url = "s3://bucket/p?%s=%s&region=x" % (key, self.SECRET)
            p = self.print_config("--backend", url)
            self.assertEqual(p.returncode, 1, p.stdout)
            text = self.assert_refused(p, "--backend: the URL holds %s" % key, "config file")
            self.assertNotIn(self.SECRET, text)
        p = self.print_config("--backend", "s3://bucket/p?region=x&access_key_id=AKIA")
        self.assertEqual(p.returncode, 0, p.stderr)


class Output(TwoUsers):
    """Where get writes, in places the attacker may write too."""

    def setUp(self):
        super().setUp()
        self.sock = os.path.join(self.home, "run", "cairnd.sock")
        d = self.victim_daemon(self.sock, os.path.join(self.home, "data"))
        self.wait_for(self.sock, d)
        self.profile = os.path.join(self.home, ".profile")
        with open(self.profile, "wb") as f:
            f.write(b"# mine\n")
        os.chown(self.profile, VICTIM, VICTIM)

    def vcairn(self, *args, input=None):
        return self.cairn("--no-autostart", "--socket", self.sock, *args, input=input)

    def test_get_r_never_follows_a_link_planted_in_dir(self):
        for name in ("p/.profile", "p/q/.profile"):
            p = self.vcairn("add", "-n", name, "-", input=b"restored\n")
            self.assertEqual(p.returncode, 0, p.stderr)
        out = self.user_dir("out", ATTACKER, 0o777, parent=self.shared)
        os.symlink(self.home, os.path.join(out, "p"))
        p = self.vcairn("get", "-r", "p", out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_refused(p, "not restored: a symbolic link or a file is in the way")
        with open(self.profile, "rb") as f:
            self.assertEqual(f.read(), b"# mine\n", "get -r followed the link")
        self.assertFalse(os.path.exists(os.path.join(self.home, "q")), "a directory made through the link")
        # Without the link the tree is restored, a link as the last component replaced.
        os.unlink(os.path.join(out, "p"))
        clean = os.path.join(self.home, "clean")
        p = self.vcairn("get", "-r", "p", clean)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(clean, "p", "q", ".profile"), "rb") as f:
            self.assertEqual(f.read(), b"restored\n")
        os.symlink(self.profile, os.path.join(clean, "p", ".profile.tmp"))
        os.replace(os.path.join(clean, "p", ".profile.tmp"), os.path.join(clean, "p", ".profile"))
        p = self.vcairn("get", "-r", "p", clean)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.islink(os.path.join(clean, "p", ".profile")))
        with open(self.profile, "rb") as f:
            self.assertEqual(f.read(), b"# mine\n")

    def test_get_o_refuses_a_fifo_of_another_user(self):
        p = self.vcairn("add", "-n", "doc", "-", input=b"the victim's document\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        fifo = os.path.join(self.shared, "fifo")
        p = self.run_as(ATTACKER, ["mkfifo", "-m", "0666", fifo])
        self.assertEqual(p.returncode, 0, p.stderr)
        got = os.path.join(self.attacker_home, "got")
        self.start_as(ATTACKER, ["sh", "-c", 'exec cat "$0" > "$1"', fifo, got])
        self.wait_for(got)
        p = self.vcairn("get", "-o", fifo, "doc")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_refused(p, "refusing to write into a FIFO of uid %d" % ATTACKER)
        time.sleep(0.2)
        with open(got, "rb") as f:
            self.assertEqual(f.read(), b"", "the attacker read the document")
        # /dev/null (root's) and a FIFO of the victim's own still work.
        p = self.vcairn("get", "-o", "/dev/null", "doc")
        self.assertEqual(p.returncode, 0, p.stderr)
        mine = os.path.join(self.home, "fifo")
        p = self.run_as(VICTIM, ["mkfifo", mine])
        self.assertEqual(p.returncode, 0, p.stderr)
        reader = subprocess.Popen(["cat", mine], stdout=subprocess.PIPE)
        p = self.vcairn("get", "-o", mine, "doc")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(reader.communicate(timeout=TIMEOUT)[0], b"the victim's document\n")


class McpAdd(TwoUsers):
    """cairn mcp's add {path}, asked for by an agent (or by text injected
    into its context): no file at all unless --allow-path, then regular
    files below the allowed directories only, never waited on."""

    def setUp(self):
        super().setUp()
        self.sock = os.path.join(self.home, "run", "cairnd.sock")
        d = self.victim_daemon(self.sock, os.path.join(self.home, "data"))
        self.wait_for(self.sock, d)
        self.ssh = self.user_dir(".ssh", VICTIM, parent=self.home)
        self.key = os.path.join(self.ssh, "id_ed25519")
        self.docs = self.user_dir("docs", VICTIM, parent=self.home)
        for path, content in ((self.key, b"PRIVATE KEY\n"),
                              (os.path.join(self.docs, "a.txt"), b"a document\n"),
                              (os.path.join(self.docs, "empty"), b"")):
            with open(path, "wb") as f:
                f.write(content)
            os.chown(path, VICTIM, VICTIM)
        os.symlink(self.key, os.path.join(self.docs, "key-link"))
        os.mkfifo(os.path.join(self.docs, "fifo"))
        os.chown(os.path.join(self.docs, "fifo"), VICTIM, VICTIM)

    def adds(self, paths, *args):
        """{path: the tools/call result} for add {path} of each, in one cairn mcp."""
        lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "t", "version": "1"}}},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"}]
        for i, path in enumerate(paths):
            lines.append({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                          "params": {"name": "add", "arguments": {"path": path}}})
        data = "".join(json.dumps(x) + "\n" for x in lines).encode()
        p = self.run_as(VICTIM, [ct.CAIRN, "--socket", self.sock, "--no-autostart", "mcp"]
                        + list(args), input=data)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = {}
        for line in p.stdout.decode().splitlines():
            msg = json.loads(line)
            if msg.get("id"):
                out[paths[msg["id"] - 1]] = msg["result"]
        self.assertEqual(len(out), len(paths), p.stdout)
        return out

    def text(self, result):
        return result["content"][0]["text"]

    def test_no_file_without_allow_path(self):
        r = self.adds([self.key, os.path.join(self.docs, "a.txt")])
        for path, result in r.items():
            self.assertTrue(result.get("isError"), (path, result))
            self.assertIn("reading files is off", self.text(result))
        p = self.cairn("--no-autostart", "--socket", self.sock, "ls")
        self.assertEqual(p.stdout, b"", "something was stored")

    def test_only_regular_files_below_allowed_directories(self):
        refused = {self.key: "not below", "/proc/self/environ": "not below",
                   os.path.join(self.docs, "key-link"): "not below",
                   os.path.join(self.docs, "..", ".ssh", "id_ed25519"): "not below",
                   os.path.join(self.docs, "fifo"): "not a regular file",
                   "/dev/urandom": "not below"}
        ok = [os.path.join(self.docs, "a.txt"), os.path.join(self.docs, "empty")]
        r = self.adds(list(refused) + ok, "--allow-path", self.docs)
        for path, why in refused.items():
            self.assertTrue(r[path].get("isError"), (path, r[path]))
            self.assertIn(why, self.text(r[path]), path)
        for path in ok:
            self.assertFalse(r[path].get("isError"), (path, r[path]))
        self.assertEqual(r[ok[0]]["structuredContent"]["hash"], sha(b"a document\n"))
        self.assertEqual(r[ok[1]]["structuredContent"]["size"], 0)
        p = self.cairn("--no-autostart", "--socket", self.sock, "ls")
        self.assertNotIn(b"id_ed25519", p.stdout)
        self.assertNotIn(b"environ", p.stdout)


class Hygiene(TwoUsers):
    def test_no_core_dumps(self):
        import resource

        def unlimited():
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        sock = os.path.join(self.home, "run", "cairnd.sock")
        log = open(os.path.join(self.base, "core.log"), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen(as_uid(VICTIM, [ct.CAIRND, "--socket", sock, "--data-dir",
                                             os.path.join(self.home, "data")]),
                             env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=unlimited)
        self.addCleanup(self.kill, p)
        self.wait_for(sock, p)
        with open("/proc/%d/limits" % p.pid) as f:
            line = [ln for ln in f if ln.startswith("Max core file size")][0]
        self.assertEqual(line.split()[4:6], ["0", "0"], line)
        self.stop(p)

    def test_no_password_in_an_sftp_url(self):
        url = "sftp://me:hunter2-secret@127.0.0.1/store"
        p = self.run_as(VICTIM, [ct.CAIRND, "--data-dir", os.path.join(self.home, "data"),
                                 "--backend", url, "--print-config"])
        self.assertEqual(p.returncode, 1, p.stdout)
        text = self.assert_refused(p, "takes no password")
        self.assertNotIn("hunter2", text)
        conf = os.path.join(self.home, "c.conf")
        with open(conf, "w") as f:
            f.write("[backend]\nurl = %s\n" % url)
        os.chown(conf, VICTIM, VICTIM)
        os.chmod(conf, 0o600)
        p = self.run_as(VICTIM, [ct.CAIRND, "--data-dir", os.path.join(self.home, "data"),
                                 "--config", conf, "--print-config"])
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertNotIn("hunter2", self.assert_refused(p, "takes no password"))

    def test_outside_text_cannot_forge_log_lines(self):
        # A name someone else chose (here a directory of the attacker's) reaches the log.
        evil = self.user_dir("x\ncairnd: info: FORGED\x1b[2J", ATTACKER, 0o777, parent=self.shared)
        p = self.run_as(VICTIM, [ct.CAIRND, "--socket", os.path.join(self.home, "s", "c.sock"),
                                 "--data-dir", evil])
        self.assertEqual(p.returncode, 1)
        text = self.assert_refused(p, "refusing the data directory")
        self.assertFalse([ln for ln in text.splitlines() if ln.startswith("cairnd: info: FORGED")],
                         text)
        self.assertNotIn("\x1b", text)


class McpMemory(TwoUsers):
    """One request line must not cost more than a bounded amount: 4 MiB of
    "[{},{},..." took about 320 MiB before values were counted."""

    def setUp(self):
        super().setUp()
        self.sock = os.path.join(self.home, "run", "cairnd.sock")
        d = self.victim_daemon(self.sock, os.path.join(self.home, "data"))
        self.wait_for(self.sock, d)

    def hwm_kib(self, pid):
        with open("/proc/%d/status" % pid) as f:
            return [int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")][0]

    def test_a_line_of_millions_of_values(self):
        p = subprocess.Popen(as_uid(VICTIM, [ct.CAIRN, "--socket", self.sock, "--no-autostart",
                                             "mcp"]), env=self.env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.addCleanup(self.kill, p)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}}
        p.stdin.write(json.dumps(init).encode() + b"\n")
        p.stdin.flush()
        self.assertEqual(json.loads(p.stdout.readline())["id"], 1)
        values = ",".join(["{}"] * (4 * ct.MiB // 3))
        big = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add",'
               '"arguments":{"content":"x","tags":[%s]}}}\n' % values).encode()
        p.stdin.write(big)
        p.stdin.flush()
        reply = json.loads(p.stdout.readline())
        self.assertLess(self.hwm_kib(p.pid), 100 * 1024, "cairn mcp peaked at %d KiB"
                        % self.hwm_kib(p.pid))
        self.assertIn("error", reply, reply)
        # A document of megabytes in one string is still fine.
        text = "word " * (ct.MiB // 2)
        add = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "add", "arguments": {"content": text, "name": "big.txt"}}}
        p.stdin.write(json.dumps(add).encode() + b"\n")
        p.stdin.flush()
        reply = json.loads(p.stdout.readline())
        self.assertFalse(reply["result"].get("isError"), reply)
        self.assertLess(self.hwm_kib(p.pid), 100 * 1024)
        p.stdin.close()
        self.assertEqual(p.wait(TIMEOUT), 0)


if __name__ == "__main__":
    ct.main()
