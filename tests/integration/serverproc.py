"""What the fixtures' test servers (azurefixture, s3fixture, sshfixture)
share: one child process in self.proc, its log at self.log_path, named
LOG_NAME in a log tail, and the module's set of running servers in LIVE,
which that module's atexit hook stops."""

import atexit
import os
import subprocess

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
