#!/usr/bin/env python3
"""`cairn-loadgen --transport mcp` against a real cairnd, through real
`cairn mcp` processes (the loadgen from $CAIRN_LOADGEN, cairn from $CAIRN):

  McpTransport    every profile at 2 clients finishes with 0 failures and
                  the JSON says "transport": "mcp"; while a run lasts there
                  is one `cairn mcp` per client (children of the loadgen),
                  and none is left once it exits; --pipeline 4 queues
                  requests in cairn mcp without failures; a `cairn mcp`
                  killed mid-run counts as disconnected and its client
                  starts another
  BadCairn        a --cairn that does not exist, or a program that is not
                  cairn, ends the run with status 1 and says why;
                  --content random is refused with mcp (status 2)
  ErrorKinds      how replies are counted, with a stand-in for `cairn mcp`
                  that fails every call in turn: a tool result with isError
                  counts under the daemon error code its text ends with
                  ("(not_found)"), or as tool_error; a JSON-RPC error as
                  rpc_error (cairn mcp itself is never replaced elsewhere)
"""

import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

LOADGEN = os.environ.get("CAIRN_LOADGEN") or os.path.join(ct.REPO_ROOT, "build", "bench",
                                                         "cairn-loadgen")
PROFILES = ["get", "add", "search", "mixed", "external_agent_churn"]
RUN_TIMEOUT = 120 * ct.SLOW


def mcp_children(socket_path):
    """pids of live `cairn ... --socket SOCKET ... mcp` processes, whoever started them."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
            st = ct.process_status(int(entry))
        except OSError:
            continue
        if (socket_path.encode() in argv and b"mcp" in argv
                and not st.get("State", "").startswith("Z")):
            pids.append((int(entry), int(st.get("PPid", "0"))))
    return pids


class LoadgenCase(unittest.TestCase):
    def setUp(self):
        if not os.access(LOADGEN, os.X_OK):
            self.fail("no cairn-loadgen at %s (set CAIRN_LOADGEN)" % LOADGEN)
        self.d = ct.Daemon(self)
        self.d.start()
        self.json_path = os.path.join(self.d.base, "loadgen.json")

    def argv(self, profile, *extra, clients=2, transport="mcp", cairn=None):
        return [LOADGEN, "--socket", self.d.socket_path, "--transport", transport,
                "--cairn", cairn or ct.CAIRN, "--clients", str(clients), "--profile", profile,
                "--files", "10", "--json", self.json_path, "--quiet"] + list(extra)

    def run_loadgen(self, argv):
        r = subprocess.run(argv, capture_output=True, timeout=RUN_TIMEOUT)
        return r.returncode, r.stderr.decode(errors="replace")

    def report(self):
        with open(self.json_path) as f:
            return json.load(f)

    def assert_clean(self, data, what):
        self.assertEqual(data["schema"], "cairn-loadgen/1")
        self.assertEqual(data["transport"], "mcp", what)
        self.assertGreater(data["ops"], 0, what)
        self.assertEqual(data["failures"], 0, "%s: %s" % (what, json.dumps(
            {op: st["errors"] for op, st in data["op_types"].items()})))

    def assert_no_children_left(self):
        self.assertEqual(mcp_children(self.d.socket_path), [], "cairn mcp left running")


class McpTransport(LoadgenCase):
    def test_every_profile_without_failures(self):
        for profile in PROFILES:
            rc, err = self.run_loadgen(self.argv(profile, "--ops-per-client", "12"))
            self.assertEqual(rc, 0, "%s: %s" % (profile, err))
            data = self.report()
            self.assert_clean(data, profile)
            ops = data["op_types"]
            if profile in ("get", "add", "search"):
                self.assertEqual(ops[profile]["count"], 24, profile)
            else:
                self.assertEqual(sum(st["count"] for op, st in ops.items() if op != "connect"),
                                 24, profile)
            if profile == "search":
                self.assertGreater(ops["search"]["hits"], 0, "searches found nothing")
            if profile == "external_agent_churn":
                # 12 requests in sessions of 4: three `cairn mcp` processes per client.
                self.assertEqual(ops["connect"]["count"], 6, json.dumps(ops["connect"]))
            self.assert_no_children_left()
        self.d.assert_healthy()

    def test_one_process_per_client_none_left(self):
        proc = subprocess.Popen(self.argv("mixed", "--duration", "3", clients=3),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            seen = []
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline and proc.poll() is None:
                seen = [pid for pid, ppid in mcp_children(self.d.socket_path)
                        if ppid == proc.pid]
                if len(seen) == 3:
                    break
                time.sleep(0.05)
            self.assertEqual(len(seen), 3, "expected one cairn mcp per client under the loadgen")
            _, err = proc.communicate(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, err.decode(errors="replace"))
        self.assert_clean(self.report(), "mixed for 3 s")
        self.assert_no_children_left()

    def test_pipelined_requests_queue(self):
        rc, err = self.run_loadgen(self.argv("mixed", "--ops-per-client", "40",
                                             "--pipeline", "4"))
        self.assertEqual(rc, 0, err)
        data = self.report()
        self.assert_clean(data, "mixed, pipeline 4")
        self.assertEqual(data["pipeline"], 4)
        self.assertEqual(data["ops"], 80)
        self.assert_no_children_left()

    def test_killed_server_counts_as_disconnected(self):
        proc = subprocess.Popen(self.argv("mixed", "--duration", "3"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            victim = None
            deadline = time.monotonic() + 2.5
            while victim is None and time.monotonic() < deadline:
                kids = [pid for pid, ppid in mcp_children(self.d.socket_path)
                        if ppid == proc.pid]
                if len(kids) == 2:
                    time.sleep(0.5)  # well into the measured phase
                    victim = kids[0]
                else:
                    time.sleep(0.05)
            self.assertIsNotNone(victim, "the loadgen started no cairn mcp")
            os.kill(victim, signal.SIGKILL)
            _, err = proc.communicate(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, err.decode(errors="replace"))
        data = self.report()
        ops = data["op_types"]
        # The request open at the kill fails; the client starts a new cairn mcp.
        self.assertGreaterEqual(ops.get("connect", {}).get("count", 0), 1, json.dumps(ops))
        for op, st in ops.items():
            self.assertLessEqual(set(st["errors"]), {"disconnected"}, op)
        self.assertLessEqual(data["failures"], 1)
        self.assert_no_children_left()


class BadCairn(LoadgenCase):
    def test_missing_binary(self):
        missing = os.path.join(self.d.base, "no-such-cairn")
        rc, err = self.run_loadgen(self.argv("get", "--ops-per-client", "5", cairn=missing))
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot run %s" % missing, err)
        self.assertIn("--cairn", err)
        self.assertFalse(os.path.exists(self.json_path))

    def test_not_cairn(self):
        rc, err = self.run_loadgen(self.argv("get", "--ops-per-client", "3", cairn="/bin/false"))
        self.assertEqual(rc, 1, err)
        self.assertIn("answered initialize", err)
        self.assertEqual(self.report()["failures"], self.report()["ops"])
        self.assert_no_children_left()

    def test_random_content_refused(self):
        rc, err = self.run_loadgen(self.argv("add", "--ops-per-client", "3", "--content",
                                             "random"))
        self.assertEqual(rc, 2, err)
        self.assertIn("--content random", err)


# Answers initialize, then fails tool call n with: isError naming a daemon
# code (n % 3 == 1), isError without one (2), a JSON-RPC error (0).
FAILING_SERVER = r"""#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    reply = {"jsonrpc": "2.0", "id": msg["id"]}
    if msg["method"] == "initialize":
        reply["result"] = {"protocolVersion": "2025-06-18", "capabilities": {},
                           "serverInfo": {"name": "failing", "version": "0"}}
    elif msg["id"] % 3 == 1:
        reply["result"] = {"content": [{"type": "text", "text": "x: not found (not_found)"}],
                           "isError": True}
    elif msg["id"] % 3 == 2:
        reply["result"] = {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    else:
        reply["error"] = {"code": -32603, "message": "out of memory"}
    print(json.dumps(reply), flush=True)
"""


class ErrorKinds(LoadgenCase):
    def test_failed_calls_are_classified(self):
        server = os.path.join(self.d.base, "failing-mcp")
        with open(server, "w") as f:
            f.write(FAILING_SERVER)
        os.chmod(server, 0o755)
        rc, err = self.run_loadgen(self.argv("get", "--ops-per-client", "9", clients=1,
                                             cairn=server))
        self.assertEqual(rc, 0, err)
        get = self.report()["op_types"]["get"]
        self.assertEqual(get["count"], 9)
        self.assertEqual(get["failures"], 9)
        self.assertEqual(get["errors"], {"not_found": 3, "tool_error": 3, "rpc_error": 3})
        self.assert_no_children_left()


if __name__ == "__main__":
    ct.main()
