"""A private OpenSSH server on loopback for the SFTP backend's tests (Python 3
standard library only).

    srv = SshServer(base_dir).start()
    url = srv.url("/abs/remote/path", connections=2)   # for cairnd --backend
    ...
    srv.stop()

start() generates, in base_dir, an ed25519 host key and an ed25519 user key
(no passphrase, ssh-keygen), an authorized_keys holding the user key, and an
sshd_config of its own (127.0.0.1 only, a free port, public keys only,
`Subsystem sftp internal-sftp`), runs `/usr/sbin/sshd -D -e -f CONFIG` with
its output in base_dir/sshd.log, and waits for the SSH banner. known_hosts
then holds the host key for `[127.0.0.1]:PORT`.

Every sshd a fixture starts is stopped by its pid: stop() (SIGTERM, then
SIGKILL), kill9(), and an atexit hook for whatever is still running when the
test process exits. The per-connection sshd processes (children of the
listener, which outlive it) are found through /proc/*/stat and killed too.

Skips (unittest.SkipTest) when sshd or ssh-keygen is not installed.
$CAIRN_TEST_SSHD names another sshd binary (absolute path).
"""

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.parse

import serverproc
from serverproc import ServerProcess

# sshd re-executes itself, so it needs an absolute path ($CAIRN_TEST_SSHD for another one)
SSHD = os.environ.get("CAIRN_TEST_SSHD") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
BANNER_TIMEOUT = 10
STOP_TIMEOUT = 10

_LIVE = serverproc.live_set()  # SshServer instances with a running sshd


def require_tools():
    """Raises unittest.SkipTest unless sshd and ssh-keygen are installed."""
    if not (os.path.isfile(SSHD) and os.access(SSHD, os.X_OK)):
        raise unittest.SkipTest("%s is not installed (Debian package openssh-server)" % SSHD)
    if not (os.path.isfile(SSH_KEYGEN) and os.access(SSH_KEYGEN, os.X_OK)):
        raise unittest.SkipTest("ssh-keygen is not installed (Debian package openssh-client)")


def free_port():
    """A loopback TCP port nobody listens on right now (bind to 0, close)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def keygen(path, comment="cairn-test"):
    """A new ed25519 key pair without passphrase at path and path.pub
    (replacing any there)."""
    for p in (path, path + ".pub"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    p = subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=30)
    if p.returncode != 0:
        raise AssertionError("ssh-keygen failed for %s: %s" % (path, p.stdout.decode("utf-8", "replace")))
    os.chmod(path, 0o600)
    return path


def _stat_fields(pid):
    """(comm, ppid) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm is in parentheses and may hold spaces or parentheses itself
    lp, rp = data.find("("), data.rfind(")")
    if lp < 0 or rp < 0:
        return None
    rest = data[rp + 2:].split()
    try:
        return data[lp + 1:rp], int(rest[1])
    except (IndexError, ValueError):
        return None


def _children_map():
    """{ppid: [pid, ...]} over /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = _stat_fields(int(name))
        if f is not None:
            out.setdefault(f[1], []).append(int(name))
    return out


def descendants(pid):
    """Every live process below pid (children, their children, ...)."""
    kids = _children_map()
    out = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _gone(pid):
    f = _stat_fields(pid)
    if f is None:
        return True
    try:
        with open("/proc/%d/status" % pid) as st:
            for line in st:
                if line.startswith("State:"):
                    return line.split()[1] in ("Z", "X")
    except OSError:
        return True
    return False


class SshServer(ServerProcess):
    """One sshd on 127.0.0.1. Attributes: host, port, user, user_key,
    host_key, known_hosts, authorized_keys, config, log_path, pid."""

    LOG_NAME = "sshd"
    LIVE = _LIVE

    def __init__(self, base_dir, port=None):
        self.base = os.path.abspath(base_dir)
        self.host = "127.0.0.1"
        self.port = port
        self.user = getpass.getuser()
        self.user_key = os.path.join(self.base, "user_ed25519")
        self.host_key = os.path.join(self.base, "host_ed25519")
        self.known_hosts = os.path.join(self.base, "known_hosts")
        self.authorized_keys = os.path.join(self.base, "authorized_keys")
        self.config = os.path.join(self.base, "sshd_config")
        self.pid_file = os.path.join(self.base, "sshd.pid")
        self.log_path = os.path.join(self.base, "sshd.log")
        self.proc = None
        self.starts = 0

    # -- keys and files

    def _prepare(self):
        require_tools()
        os.makedirs(self.base, exist_ok=True)
        if not os.path.exists(self.host_key):
            keygen(self.host_key, "cairn-test-host")
        if not os.path.exists(self.user_key):
            keygen(self.user_key, "cairn-test-user")
            with open(self.user_key + ".pub") as f:
                pub = f.read()
            with open(self.authorized_keys, "w") as f:
                f.write(pub)
            os.chmod(self.authorized_keys, 0o600)
        if self.port is None:
            self.port = free_port()
        with open(self.config, "w") as f:
            f.write(
                "# written by tests/integration/sshfixture.py\n"
                "ListenAddress 127.0.0.1\n"
                "Port %d\n"
                "HostKey %s\n"
                "PidFile %s\n"
                "AuthorizedKeysFile %s\n"
                "StrictModes no\n"
                "UsePAM no\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "PubkeyAuthentication yes\n"
                "PermitRootLogin prohibit-password\n"
                "AllowUsers %s\n"
                "Subsystem sftp internal-sftp\n"
                "LogLevel VERBOSE\n"
                "MaxStartups 100:30:200\n"
                "MaxSessions 64\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                % (self.port, self.host_key, self.pid_file, self.authorized_keys, self.user))
        if os.geteuid() == 0:
            # sshd's privilege separation directory (the package makes it at boot)
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    def host_key_line(self, host_key=None):
        """The known_hosts line for this server's (or the given) host key."""
        with open((host_key or self.host_key) + ".pub") as f:
            keytype, blob = f.read().split()[:2]
        return "[%s]:%d %s %s\n" % (self.host, self.port, keytype, blob)

    def write_known_hosts(self, path=None):
        """Writes a known_hosts holding the current host key; returns its path."""
        path = path or self.known_hosts
        with open(path, "w") as f:
            f.write(self.host_key_line())
        return path

    def new_user_key(self, name):
        """A fresh ed25519 key pair in base_dir that the server does not
        authorize; returns the private key's path."""
        return keygen(os.path.join(self.base, name), "cairn-test-" + name)

    def regenerate_host_key(self):
        """Replaces the host key (known_hosts keeps the old one) and restarts
        a running sshd on the same port with it."""
        running = self.running()
        if running:
            self.stop()
        keygen(self.host_key, "cairn-test-host-%d" % (self.starts + 1))
        if running:
            self.start(write_known_hosts=False)
        return self

    # -- the process

    def start(self, write_known_hosts=True, timeout=BANNER_TIMEOUT):
        assert not self.running(), "sshd already running (pid %d)" % self.pid
        self._prepare()
        with open(self.log_path, "ab") as log:
            log.write(b"=== start %d on port %d\n" % (self.starts, self.port))
            log.flush()
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", self.config], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, close_fds=True)
        self.starts += 1
        _LIVE.add(self)
        try:
            self._wait_banner(timeout)
        except BaseException:
            self.kill9()
            raise
        if write_known_hosts:
            self.write_known_hosts()
        return self

    def _wait_banner(self, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError("sshd exited with %d at start\n%s" % (rc, self.log_tail()))
            try:
                with socket.create_connection((self.host, self.port), timeout=2) as s:
                    data = b""
                    while b"\n" not in data and len(data) < 256:
                        piece = s.recv(256)
                        if not piece:
                            break
                        data += piece
                    if data.startswith(b"SSH-2.0-"):
                        return
                    last = "banner %r" % data[:80]
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise AssertionError("sshd gave no SSH banner on %s:%d within %ds (%s)\n%s"
                                     % (self.host, self.port, timeout, last, self.log_tail()))
            time.sleep(0.05)

    def session_pids(self):
        """The per-connection sshd processes (descendants of the listener)."""
        if not self.running():
            return []
        return descendants(self.proc.pid)

    def _kill_tree(self, first_sig):
        """Stops the listener (so it forks no more), collects every
        descendant, then signals them all: first_sig, and SIGKILL for those
        still there after STOP_TIMEOUT. Returns the listener's status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            _signal(self.proc.pid, signal.SIGSTOP)
            kids = []
            # sessions fork too: stop every process found until no new one shows
            for _ in range(20):
                new = [p for p in descendants(self.proc.pid) if p not in kids]
                if not new:
                    break
                for p in new:
                    _signal(p, signal.SIGSTOP)
                kids += new
            for p in [self.proc.pid] + kids:
                _signal(p, first_sig)
                if first_sig != signal.SIGKILL:
                    _signal(p, signal.SIGCONT)
            deadline = time.monotonic() + STOP_TIMEOUT
            try:
                self.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for p in kids:
                # reparented: someone else reaps them, a zombie counts as gone
                while not _gone(p) and time.monotonic() < deadline:
                    time.sleep(0.02)
                if not _gone(p):
                    _signal(p, signal.SIGKILL)
        _LIVE.discard(self)
        return self.proc.returncode

    def stop(self):
        """SIGTERM to the listener and its sessions; SIGKILL after a while."""
        return self._kill_tree(signal.SIGTERM)

    def kill9(self):
        """kill -9 of the listener and every per-connection sshd."""
        return self._kill_tree(signal.SIGKILL)

    def restart(self):
        """Stops and starts again, same port, same keys."""
        if self.running():
            self.stop()
        return self.start()

    # -- URLs and logs

    def url(self, path, key=None, known_hosts=None, **params):
        """sftp://USER@HOST:PORT/PATH?key=..&known_hosts=..&PARAMS; values
        percent-encoded (a '/' stays as it is)."""
        assert path.startswith("/"), "the remote path must be absolute: %r" % path
        q = [("key", key or self.user_key), ("known_hosts", known_hosts or self.known_hosts)]
        q += sorted(params.items())
        query = "&".join("%s=%s" % (k, urllib.parse.quote(str(v), safe="/")) for k, v in q)
        return "sftp://%s@%s:%d%s?%s" % (urllib.parse.quote(self.user, safe=""), self.host, self.port,
                                         urllib.parse.quote(path, safe="/"), query)

