"""The SFTP server of the backends suite: OpenSSH's sshd on a loopback port,
started and stopped by tests/integration/sshfixture.py (the integration
tests' fixture, reused as it is: its own host and user keys, its own
sshd_config, `Subsystem sftp internal-sftp`, 127.0.0.1 only).

The runner keeps it on its list of servers, so it is stopped - by pid,
listener and per-connection processes alike - at the end of the suite, on an
error, on Ctrl-C or SIGTERM.
"""

import os
import unittest

from . import procs

SSHD = "/usr/sbin/sshd"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "integration", "sshfixture.py")


def unavailable():
    """Why no sshd can be started here (for "not measured: ..."), or None."""
    if not (os.path.isfile(SSHD) and os.access(SSHD, os.X_OK)):
        return "sshd not installed"
    if not os.path.isfile(FIXTURE):
        return "no %s in this tree" % os.path.relpath(FIXTURE, REPO)
    return None


def _fixture():
    """tests/integration/sshfixture.py, loaded from its path (no sys.path change)."""
    return procs.fixture_module(FIXTURE)


class Sshd(procs.Server):
    """One sshd for the suite; `srv` is the fixture's SshServer (host, port,
    user, user_key, known_hosts, url(path, **params))."""

    name = "sshd"

    def __init__(self, ctx):
        super().__init__()
        why = unavailable()
        if why:
            raise procs.Skip(why)
        self.srv = _fixture().SshServer(ctx.mkdtemp("sshd"))
        procs.register_server(self)
        try:
            self.srv.start()
        except unittest.SkipTest as e:
            self.stop(check=False)
            raise procs.Skip(str(e))
        except AssertionError as e:  # the fixture's way of saying sshd did not start
            self.stop(check=False)
            raise RuntimeError("sshd did not start: %s" % str(e)[-400:])
        self.log_path = self.srv.log_path

    @property
    def pid(self):
        return self.srv.pid if self.srv else None

    def check_alive(self):
        if self.srv is not None and not self.srv.running():
            raise RuntimeError("sshd died: " + self.srv.log_tail(600))

    def ssh_options(self):
        """Options every OpenSSH client here gets: this server's key and host key
        only, no user or system ssh_config (-F /dev/null), nothing interactive."""
        s = self.srv
        return ["-F", "/dev/null", "-i", s.user_key, "-o", "IdentitiesOnly=yes",
                "-o", "UserKnownHostsFile=" + s.known_hosts,
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", "-P", str(s.port)]

    def destination(self):
        return "%s@%s" % (self.srv.user, self.srv.host)

    def stop(self, check=True):
        procs.unregister_server(self)
        srv, self.srv = self.srv, None
        if srv is not None:
            srv.stop()
