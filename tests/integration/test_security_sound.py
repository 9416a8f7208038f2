#!/usr/bin/env python3
"""What the security review found checked and sound, kept so (issue #30),
with the two uids of test_security.py where another user is the point:

  Mount      `cairn mount` is read-only, with default_permissions and
             without allow_other: another uid cannot even list it
  Tls        an https endpoint with a certificate no CA signed is refused,
             for the S3 API and for R2's credentials API alike
  Autostart  the daemon cairn starts is never one from the working directory
             (a directory others may write) nor run through a shell
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
from test_mount import Mount, fuse_missing  # noqa: E402
from test_security import ATTACKER, VICTIM, TwoUsers, as_uid  # noqa: E402

TIMEOUT = 60 * ct.SLOW


class MountIsPrivate(TwoUsers):
    def test_read_only_default_permissions_no_allow_other(self):
        why = fuse_missing()
        if why:
            self.skipTest(why)
        d = ct.Daemon(self)
        d.start()
        ct.run_cli("add", "-n", "secret.txt", "-", socket=d.socket_path, input=b"secret\n")
        mnt = os.path.join(self.shared, "mnt")
        os.mkdir(mnt)
        os.chmod(mnt, 0o755)
        Mount(d, mnt, self).start()
        with open("/proc/self/mountinfo") as f:
            [line] = [ln for ln in f if " %s " % mnt in ln]
        mount_opts = line.split()[5].split(",")
        super_opts = line.split(" - ")[1].split()[2].split(",")
        self.assertIn("ro", mount_opts, line)
        self.assertIn("default_permissions", super_opts, line)
        self.assertNotIn("allow_other", super_opts, line)
        p = self.run_as(ATTACKER, ["ls", mnt])
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(b"Permission denied", p.stderr)
        p = self.run_as(ATTACKER, ["cat", os.path.join(mnt, "secret.txt")])
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn(b"secret", p.stdout)


class Tls(unittest.TestCase):
    """openssl s_server on loopback with a self-signed certificate: cairnd
    verifies peers, so it refuses to talk to it at start, and says why."""

    def setUp(self):
        if not shutil.which("openssl"):
            self.skipTest("needs openssl (Debian: apt-get install openssl)")
        self.base = ct.make_tempdir(self)
        key, cert = os.path.join(self.base, "k.pem"), os.path.join(self.base, "c.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                        "-out", cert, "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1", "-days", "1"],
                       check=True, capture_output=True, timeout=TIMEOUT)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.srv = subprocess.Popen(["openssl", "s_server", "-quiet", "-accept",
                                     "127.0.0.1:%d" % self.port, "-cert", cert, "-key", key,
                                     "-www"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_server)
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                self.assertLess(time.monotonic(), deadline, "openssl s_server did not listen")
                time.sleep(0.05)

    def stop_server(self):
        self.srv.kill()
        self.srv.wait()

    def refused(self, url, env):
        d = ct.Daemon(self, args=["--backend", url], env=env)
        d.start(wait=False)
        rc = d.wait(TIMEOUT)
        self.assertNotEqual(rc, 0, "cairnd started on a server it cannot verify\n%s" % d.log_text())
        text = d.log_text().lower()
        self.assertTrue("certificate" in text or "ssl" in text or "tls" in text, d.log_text())

    def test_s3_endpoint(self):
        self.refused("s3://bucket/p?endpoint=https://127.0.0.1:%d&region=us-east-1" % self.port,
                     {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                      "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"})

    def test_r2_credentials_api(self):
        self.refused("r2://bucket/p?account=023e105f4ecef8ad9ca31a8372d0c353"
                     "&api_base=https://127.0.0.1:%d/client/v4"
                     "&endpoint=https://127.0.0.1:%d" % (self.port, self.port),
                     {"CLOUDFLARE_API_TOKEN": "tok", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE"})


FAKE_DAEMON = "#!/bin/sh\ntouch \"$0.ran\"\n"


class Autostart(TwoUsers):
    def test_nothing_from_the_working_directory_or_a_shell(self):
        """The victim runs `cairn ls` in a directory the attacker may write,
        holding a `cairnd` and a `sh` of the attacker's: neither runs, the
        real cairnd does."""
        trap = os.path.join(self.shared, "trap")
        os.mkdir(trap)
        os.chmod(trap, 0o1777)
        for name in ("cairnd", "sh"):
            path = os.path.join(trap, name)
            with open(path, "w") as f:
                f.write(FAKE_DAEMON)
            os.chmod(path, 0o755)
            os.chown(path, ATTACKER, ATTACKER)
        sock = os.path.join(self.home, "run", "cairnd.sock")
        env = self.env(CAIRND=None, PATH=".:/usr/bin:/bin")
        p = subprocess.run(as_uid(VICTIM, [ct.CAIRN, "--socket", sock, "ls"]), env=env,
                           cwd=trap, capture_output=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in ("cairnd", "sh"):
            self.assertFalse(os.path.exists(os.path.join(trap, name + ".ran")),
                             "the attacker's %s ran" % name)
        self.assertTrue(os.path.exists(sock))


if __name__ == "__main__":
    ct.main()
