"""Processes: timed command runs, and the servers a suite starts (cairnd,
redis-server, sshd), which are always stopped again - at the end of the suite, on
an exception, on Ctrl-C or SIGTERM, and (through PR_SET_PDEATHSIG) even when
the runner itself is killed."""

import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

_fixture_modules = {}


def fixture_module(path):
    """A helper module of tests/integration (a fixture), loaded once from its
    path, without a change to sys.path."""
    if path not in _fixture_modules:
        # the helper the fixtures share, which they import by name
        helper = os.path.join(os.path.dirname(path), "serverproc.py")
        if "serverproc" not in sys.modules and os.path.isfile(helper):
            spec = importlib.util.spec_from_file_location("serverproc", helper)
            sys.modules["serverproc"] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules["serverproc"])
        name = "cairn_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _fixture_modules[path] = module
    return _fixture_modules[path]


_servers = []  # every server started and not yet stopped


class SuiteError(Exception):
    """A cairn component failed: the suite cannot go on, and the run fails."""


class Skip(Exception):
    """The suite (or part of it) cannot run here; reported, not a failure."""


def _die_with_parent():
    # 1 = PR_SET_PDEATHSIG: the kernel stops the server if the runner dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def stop_all_servers():
    for server in list(_servers):
        server.stop(check=False)


def register_server(server):
    """For servers started some other way than Server._spawn (sshd, through
    its test fixture): stop_all_servers() then stops them too."""
    if server not in _servers:
        _servers.append(server)


def unregister_server(server):
    if server in _servers:
        _servers.remove(server)


def install_signal_handlers():
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every `finally` stops its servers."""
    def handler(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


class Result:
    def __init__(self, seconds, returncode, maxrss_kib, stdout=None, stderr=""):
        self.seconds = seconds
        self.returncode = returncode
        self.maxrss_kib = maxrss_kib
        self.stdout = stdout
        self.stderr = stderr

    @property
    def ms(self):
        return self.seconds * 1000.0


GNU_TIME = "/usr/bin/time"


class _PeakRss:
    """Peak RSS of a command through GNU time's %M.

    Not wait4()'s ru_maxrss: Linux charges a child with the resident size of
    the process it was spawned from (this Python runner) until it execs, so
    every small tool would look as large as the runner. GNU time forks the
    command from a process of its own, a few hundred KiB small.
    """

    def __init__(self, argv, enabled):
        self.path = None
        self.argv = argv
        if enabled and os.access(GNU_TIME, os.X_OK):
            fd, self.path = tempfile.mkstemp(prefix="rss-")
            os.close(fd)
            self.argv = [GNU_TIME, "-f", "%M", "-o", self.path] + list(argv)

    def kib(self):
        if not self.path:
            return None
        try:
            with open(self.path) as f:
                lines = [line.strip() for line in f if line.strip()]
            return int(lines[-1]) if lines and lines[-1].isdigit() else None
        finally:
            os.unlink(self.path)


def run_timed(argv, stdin=None, stdout=None, capture=False, env=None, cwd=None, rss=False,
              timeout=None):
    """Runs a command once and returns its wall time and exit code (and, with
    `rss`, its peak RSS).

    The clock runs from just before the process is spawned to the moment it
    has been reaped, so every tool pays the same spawn cost (measuring RSS adds
    GNU time's own spawn; use it for long commands only). stdout goes to
    /dev/null unless a file is given or `capture` is set; stderr is kept for
    error messages. A command still running after `timeout` seconds is killed
    and is a SuiteError: a benchmark that hangs must not hang the run.
    """
    peak = _PeakRss(argv, rss)
    out_file = tempfile.TemporaryFile() if capture else None
    err_file = tempfile.TemporaryFile()
    out = out_file if capture else (stdout if stdout is not None else subprocess.DEVNULL)
    t0 = time.perf_counter()
    p = subprocess.Popen(peak.argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                         stdout=out, stderr=err_file, env=env, cwd=cwd)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise SuiteError("%s did not finish within %d s" % (" ".join(argv[:3]), timeout))
    elapsed = time.perf_counter() - t0
    err_file.seek(0)
    stderr = err_file.read().decode(errors="replace")
    err_file.close()
    text = None
    if out_file:
        out_file.seek(0)
        text = out_file.read().decode(errors="replace")
        out_file.close()
    return Result(elapsed, p.returncode, peak.kib(), text, stderr)


def run_pipeline_timed(first, second, stdout, env=None, cwd=None):
    """`first | second > stdout`, timed from the first spawn to the last reaping.

    Returns (seconds, [returncode...], the larger peak RSS in KiB of the two).
    """
    pa, pb = _PeakRss(first, True), _PeakRss(second, True)
    t0 = time.perf_counter()
    a = subprocess.Popen(pa.argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    b = subprocess.Popen(pb.argv, stdin=a.stdout, stdout=stdout, stderr=subprocess.DEVNULL,
                         env=env, cwd=cwd)
    a.stdout.close()
    codes = []
    for p in (a, b):
        _, status, _ = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        codes.append(p.returncode)
    elapsed = time.perf_counter() - t0
    rss = [k for k in (pa.kib(), pb.kib()) if k is not None]
    return elapsed, codes, max(rss) if rss else None


def check_ok(result, what):
    """Raises SuiteError when a cairn command failed; signals count as crashes."""
    if result.returncode != 0:
        kind = ("killed by signal %d" % -result.returncode if result.returncode < 0
                else "exit %d" % result.returncode)
        raise SuiteError("%s failed (%s): %s" % (what, kind, result.stderr.strip()[-400:]))
    return result


def peak_rss_kib(pid):
    """VmHWM of a running process: its peak resident set so far."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _wait_for_socket(path, proc, timeout, log_path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SuiteError("server exited with %s at start: %s"
                             % (proc.returncode, _tail(log_path)))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.02)
        finally:
            s.close()
    raise SuiteError("server did not listen on %s within %d s" % (path, timeout))


def _tail(path, n=800):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


class Server:
    """A process started for a suite; a context manager that always stops it."""

    name = "server"

    def __init__(self):
        self.proc = None
        self.log_path = None

    def _spawn(self, argv, log_path, socket_path, timeout=10, env=None):
        self.log_path = log_path
        log = open(log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=_die_with_parent, env=env)
        finally:
            log.close()
        _servers.append(self)
        try:
            _wait_for_socket(socket_path, self.proc, timeout, log_path)
        except BaseException:
            self.stop(check=False)
            raise

    @property
    def pid(self):
        return self.proc.pid

    def check_alive(self):
        if self.proc and self.proc.poll() is not None:
            raise SuiteError("%s died (exit status %s): %s"
                             % (self.name, self.proc.returncode, _tail(self.log_path)))

    def peak_rss_kib(self):
        return peak_rss_kib(self.proc.pid) if self.proc else None

    def stop(self, check=True):
        """SIGTERM, then SIGKILL after 30 s. With `check`, an unclean exit is an error."""
        if not self.proc:
            return
        proc, self.proc = self.proc, None
        if self in _servers:
            _servers.remove(self)
        died_before = proc.poll() is not None
        if not died_before:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                if check:
                    raise SuiteError("%s did not stop within 30 s of SIGTERM" % self.name)
        if check and (died_before or proc.returncode != 0):
            raise SuiteError("%s %s (exit status %s): %s"
                             % (self.name, "died" if died_before else "stopped uncleanly",
                                proc.returncode, _tail(self.log_path)))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # On an error already unwinding, stop without raising over it.
        self.stop(check=exc_type is None)
        return False


class Cairnd(Server):
    """cairnd on a temporary socket and data directory."""

    name = "cairnd"

    def __init__(self, ctx, label, config=None, env=None):
        """`env`: the whole environment to run it in (default: the runner's)."""
        super().__init__()
        self.ctx = ctx
        self.dir = ctx.mkdtemp("d-" + label)
        self.socket = os.path.join(self.dir, "run", "cairnd.sock")
        self.data_dir = os.path.join(self.dir, "data")
        argv = [ctx.bin["cairnd"], "--socket", self.socket, "--data-dir", self.data_dir,
                "--log-level", "warn"]
        if config:
            conf = os.path.join(self.dir, "cairn.conf")
            with open(conf, "w") as f:
                f.write(config)
            argv += ["--config", conf]
        else:
            # An empty config file: the user's own ~/.config/cairn/cairn.conf must not apply.
            conf = os.path.join(self.dir, "cairn.conf")
            open(conf, "w").close()
            argv += ["--config", conf]
        env = dict(os.environ if env is None else env)
        env.pop("CAIRN_SOCKET", None)
        env.pop("CAIRN_DATA_DIR", None)
        self._argv, self._env = argv, env
        self.start()

    def start(self):
        """Starts cairnd; again after stop(), on the same socket, data directory and config."""
        self._spawn(self._argv, os.path.join(self.dir, "cairnd.log"), self.socket, env=self._env)

    def cli(self, *args):
        return [self.ctx.bin["cairn"], "--socket", self.socket, "--no-autostart"] + list(args)

    def status(self):
        import json
        r = check_ok(run_timed(self.cli("--json", "status"), capture=True), "cairn status")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def disk_bytes(self):
        """Bytes on disk under the data directory: objects, database, WAL."""
        return du_bytes(self.data_dir)

    def db_bytes(self):
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = os.path.join(self.data_dir, "cairn.db" + suffix)
            if os.path.exists(p):
                total += os.stat(p).st_blocks * 512
        return total


class Redis(Server):
    """redis-server on a Unix socket only, with every write fsynced (appendfsync always)."""

    name = "redis-server"

    def __init__(self, ctx):
        super().__init__()
        self.dir = ctx.mkdtemp("redis")
        self.socket = os.path.join(self.dir, "redis.sock")
        argv = ["redis-server", "--port", "0", "--unixsocket", self.socket,
                "--unixsocketperm", "700", "--dir", self.dir, "--save", "",
                "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no",
                "--logfile", ""]
        self._spawn(argv, os.path.join(self.dir, "redis.log"), self.socket)

    def populate(self, count, size):
        """SETs key:000000000000 .. count-1 (redis-benchmark's -r key names) to `size` bytes."""
        value = os.urandom(size // 2).hex().encode()[:size].ljust(size, b"x")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.socket)
        try:
            batch = 100
            for start in range(0, count, batch):
                n = min(batch, count - start)
                buf = b"".join(b"*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$%d\r\n%s\r\n"
                               % (i, size, value) for i in range(start, start + n))
                s.sendall(buf)
                got = b""
                while got.count(b"\r\n") < n:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise SuiteError("redis-server hung up while being populated")
                    got += chunk
                if b"-" in got[:1] or b"\r\n-" in got:
                    raise SuiteError("redis-server refused a SET: %r" % got[:200])
        finally:
            s.close()


def du_bytes(path):
    """Allocated bytes of every file below `path` (like du), hard links once."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def tree_bytes(path):
    """Apparent size of every regular file below `path`."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)
