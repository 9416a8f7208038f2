"""What the fixtures' test servers (azurefixture, s3fixture, sshfixture)
share: one child process in self.proc, its log at self.log_path, named
LOG_NAME in a log tail, and the module's set of running servers in LIVE,
which that module's atexit hook stops."""

import atexit
import json
import os
import select
import signal
import subprocess
import time
import urllib.error
import urllib.request

STOP_TIMEOUT = 10


def live_set():
    """A fixture module's set of running servers, which are all killed
    (SIGKILL) when the process exits."""
    live = set()

    def stop_all():
        for srv in list(live):
            try:
                srv.kill9()
            except Exception:
                pass

    atexit.register(stop_all)
    return live


class ServerProcess:
    LOG_NAME = "server"
    LIVE = set()
    proc = None
    log_path = None

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, SIGKILL after STOP_TIMEOUT; returns the exit status."""
        return self._end(signal.SIGTERM)

    def kill9(self):
        """kill -9 of the server."""
        return self._end(signal.SIGKILL)

    def _end(self, sig):
        """`sig` to the server, SIGKILL after STOP_TIMEOUT; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.LIVE.discard(self)
        return self.proc.returncode

    def spawn_ready(self, args, cwd, timeout, what, env=None, banner=None):
        """Starts the server (stdout a pipe, stderr appended to log_path after
        `banner`), registers it in LIVE and returns its ready line's object
        (read_ready); a server that prints none is killed."""
        with open(self.log_path, "ab") as log:
            if banner:
                log.write(banner)
                log.flush()
            self.proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=log, close_fds=True)
        self.LIVE.add(self)
        try:
            return self.read_ready(timeout, what)
        except BaseException:
            self.kill9()
            raise

    def read_ready(self, timeout, what):
        """The JSON object of the ready line the server (`what`, for the
        messages) prints on its stdout, a pipe, within timeout seconds."""
        deadline = time.monotonic() + timeout
        line = b""
        fd = self.proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("%s printed no ready line within %ds\n%s" % (what, timeout, self.log_tail()))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            piece = os.read(fd, 4096)
            if not piece:
                rc = self.proc.wait()
                raise AssertionError("%s exited with %s at start\n%s" % (what, rc, self.log_tail()))
            line += piece
        try:
            return json.loads(line.decode("utf-8"))
        except ValueError:
            raise AssertionError("%s printed %r instead of its ready line\n%s" % (what, line, self.log_tail()))

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, limit=4000):
        return "--- %s log (%s) ---\n%s" % (self.LOG_NAME, self.log_path, self.log_text()[-limit:])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def json_request(method, url, body=None, headers=None, timeout=10):
    """(status, parsed JSON or raw bytes) of one request to a test server's
    control port; body: bytes, or an object sent as JSON."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw.decode("utf-8"))
    except ValueError:
        return status, raw
