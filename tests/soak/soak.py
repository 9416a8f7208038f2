#!/usr/bin/env python3
"""The soak: a long run of load and faults (not part of ./scripts/check).

    tests/soak/soak.py [--backend local|s3|sftp] [--minutes 30] [--clients 16]
                       [--period 90] [--seed N] [--final-verify-only]
                       [--build DIR] [--json FILE]

cairnd's data directory is on powercutfs (tests/powercut), which keeps only
what was synced. For --minutes, period after period (each about --period
seconds, varied at random): cairn-loadgen runs the `mixed` profile (50% get,
25% search, 15% add, 10% delete) at --clients clients, while the power-cut
test's own clients (test_powercut.py: adders, `cairn rm`, gc) add and delete
documents whose every acknowledgement they record. Each period ends in a
fault, a power cut and a `kill -9` of cairnd by turns: a cut drops everything
unsynced and kills cairnd. After every fault cairnd must start by itself,
every acknowledged add must read back with its hash, every acknowledged
delete must stay deleted, and `cairn verify` must be clean; the run ends
with the totals: load held (loadgen's operations per second, each period),
faults survived, acknowledged writes, and acknowledged writes lost (must be
0). Exit status 0 when nothing was lost, 1 otherwise.

--backend s3 keeps the packs on the S3 test server (s3fixture.py, shared
with the integration tests), which fails 5% of the requests (503, 500, a
reset before or after the request is carried out, a stall, a truncated
body) with 20 ms of latency on each; the faults are then, by turns, a
`kill -9` of cairnd, a `kill -9` of the S3 server (started again a few
seconds later on the same port and data, while cairnd runs) and a power
cut of cairnd's data directory (its database). --backend sftp keeps them
on the test sshd (sshfixture.py); the faults are a `kill -9` of cairnd and
a `kill -9` of sshd and its sessions (started again on the same port). A
cairnd that outlived its server's crash must still run, and is checked as
it is. Every server the soak starts is stopped by its pid.
--final-verify-only leaves `cairn verify` out of the checks after each
fault (it reads every record, one at a time: on the faulty S3 server each
stall costs it stall_timeout) and runs it at the end only.

Needs root (to mount powercutfs), /dev/fuse, fusermount3, and a build with
cairnd, cairn, cairn-loadgen and powercutfs (--build, default build/).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# the faults of each backend, by turns
FAULTS = {
    "local": ("kill -9", "power cut"),
    "s3": ("kill -9", "server kill -9", "power cut"),
    "sftp": ("kill -9", "server kill -9"),
}
S3_FAULTS = {"fault_rate": 0.05, "faults": ["503", "500", "reset", "reset_request", "stall", "truncate"],
             "latency": "rtt20"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=sorted(FAULTS), default="local")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--period", type=float, default=90, help="seconds between faults, on average")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--final-verify-only", action="store_true",
                    help="cairn verify at the end only, not after every fault")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default=None, help="also write the totals here")
    return ap.parse_args()


class Remote:
    """The backend's server (none for local), its faults, and what they did."""

    def __init__(self, ct, backend, cleanups):
        self.backend = backend
        self.srv = {"local": lambda: None, "s3": ct.s3_server, "sftp": ct.sftp_server}[backend]()
        self.injected = self.requests = 0
        if self.srv is not None:
            cleanups.addCleanup(self.srv.stop)
        self.configure()

    def configure(self):
        if self.backend == "s3":
            self.srv.control(**S3_FAULTS)

    def tally(self):
        """Adds up the S3 server's counters, which a restart zeroes."""
        if self.backend == "s3" and self.srv.running():
            c = self.srv.counters()
            self.injected += c["faults_total"]
            self.requests += c["requests_total"]
            self.srv.control(reset_counters=True)

    def kill9(self, rng):
        """kill -9 of the server; started again a few seconds later on the
        same port (and data), where the running cairnd finds it."""
        self.tally()
        self.srv.kill9()
        time.sleep(rng.uniform(0.5, 5.0))
        if self.backend == "s3":
            self.srv.start(s3_port=self.srv.s3_port)
        else:
            self.srv.start()
        self.configure()


def commit():
    p = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=7"],
                       capture_output=True, text=True)
    return p.stdout.strip() or None


class Cleanups:
    """What test_powercut's fixtures expect of a test case: addCleanup."""

    def __init__(self):
        self.fns = []

    def addCleanup(self, fn, *args, **kw):
        self.fns.append((fn, args, kw))

    def run(self):
        while self.fns:
            fn, args, kw = self.fns.pop()
            try:
                fn(*args, **kw)
            except Exception as e:  # a cleanup must not hide the others
                print("soak: cleanup %r: %r" % (fn, e), file=sys.stderr)


def main():
    args = parse_args()
    build = os.path.abspath(args.build)
    os.environ.setdefault("CAIRND", os.path.join(build, "daemon", "cairnd"))
    os.environ.setdefault("CAIRN", os.path.join(build, "client", "cairn"))
    os.environ.setdefault("POWERCUTFS", os.path.join(build, "tests", "powercut", "powercutfs"))
    loadgen = os.path.join(build, "bench", "cairn-loadgen")
    os.environ["CAIRN_TEST_BACKEND"] = args.backend  # cairntest.Daemon then uses it
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import cairntest as ct
    import test_powercut as tp
    import unittest

    reason = tp.skip_reason()
    if reason:
        print("soak: cannot run: %s" % reason, file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    faults = FAULTS[args.backend]
    print("soak: seed %d, %s backend, %.0f minutes, %d loadgen clients, a fault every ~%.0f s (%s)"
          % (seed, args.backend, args.minutes, args.clients, args.period, ", ".join(faults)),
          file=sys.stderr)

    # test_powercut.PowerCuts' methods do the cut, the rebuild-free checks
    # and the daemon's config; borrow them on a bare instance.
    cuts = tp.PowerCuts("test_acknowledged_writes_survive_power_cuts")
    cleanups = Cleanups()
    cuts.addCleanup = cleanups.addCleanup
    cuts.rng = rng
    cuts.base = ct.make_tempdir(None, prefix="cairn-soak-")
    totals = {"backend": args.backend, "commit": commit(), "seed": seed, "minutes": args.minutes,
              "clients": args.clients, "periods": [], "power_cuts": 0, "kill9": 0, "server_kill9": 0,
              "verify_after_each_fault": not args.final_verify_only,
              "acknowledged_writes": 0, "lost": 0, "problems": []}
    if args.backend == "s3":
        totals["s3_faults"] = S3_FAULTS
    try:
        try:
            remote = Remote(ct, args.backend, cleanups)
        except unittest.SkipTest as e:
            print("soak: cannot run: %s" % e, file=sys.stderr)
            return 2
        cuts.fs = tp.PowercutFS(cuts, os.path.join(cuts.base, "mnt"),
                                os.path.join(cuts.base, "powercutfs.log"))
        d = cuts.daemon({})
        d.start()
        ledger = tp.Ledger()
        end = time.monotonic() + args.minutes * 60
        n = 0
        while time.monotonic() < end:
            n += 1
            period = min(rng.uniform(0.5, 1.5) * args.period, max(5.0, end - time.monotonic()))
            fault = faults[(n - 1) % len(faults)]
            work = tp.Workload(d, ledger, rng.randrange(1 << 30))
            work.start()
            out = os.path.join(cuts.base, "loadgen-%d.json" % n)
            lg = subprocess.run([loadgen, "--socket", d.socket_path, "--clients", str(args.clients),
                                 "--profile", "mixed", "--duration", "%.1f" % max(1.0, period - 2),
                                 "--files", "64", "--file-size", "16384", "--seed", str(n),
                                 "--json", out, "--quiet"], capture_output=True,
                                timeout=period + 300)
            rec = {"period": n, "seconds": round(period, 1), "fault": fault}
            if lg.returncode == 0 and os.path.exists(out):
                with open(out) as f:
                    rep = json.load(f)
                rec["ops_per_s"] = round(rep["ops_per_s"])
                rec["loadgen_failures"] = rep.get("failures")
            else:
                rec["loadgen_failed"] = lg.stderr.decode(errors="replace")[-300:]
            time.sleep(max(0.0, rng.uniform(0.0, 2.0)))
            work.cutting.set()
            before = cuts.fs.counters()["dropped"]
            if fault == "power cut":
                cuts.cut(d.proc)
                totals["power_cuts"] += 1
                rec["dropped_unsynced"] = cuts.fs.counters()["dropped"] > before
            elif fault == "kill -9":
                d.kill9()
                totals["kill9"] += 1
            else:
                remote.kill9(rng)
                totals["server_kill9"] += 1
            checking = time.monotonic()
            work.join()
            found = list(work.errors)
            if fault == "server kill -9" and not d.running():
                found.append("cairnd exited with %r when its server was killed" % d.proc.returncode)
            found += cuts.problems(d, ledger, verify=not args.final_verify_only)
            rec["check_seconds"] = round(time.monotonic() - checking)
            lost = [p for p in found if "lost" in p or "undone" in p or "wrong" in p]
            totals["lost"] += len(lost)
            totals["problems"] += found[:20]
            rec["acknowledged_so_far"] = ledger.acks
            totals["periods"].append(rec)
            print("soak: period %d (%.0f s, %s): %s ops/s, %d acknowledged writes so far, %d problems"
                  % (n, period, fault, rec.get("ops_per_s", "loadgen failed"), ledger.acks, len(found)),
                  file=sys.stderr)
            if found:
                print("\n".join("  " + p for p in found[:10]), file=sys.stderr)
        p = d.cli("--json", "verify", check_exit=None, timeout=3600)  # slow on the faulty S3 server
        totals["final_verify"] = p.stdout.decode(errors="replace").strip()[-500:]
        totals["final_verify_ok"] = p.returncode == 0
        d.stop()
        remote.tally()
    finally:
        cleanups.run()
    if args.backend == "s3":
        totals["s3_requests"] = remote.requests
        totals["s3_injected_faults"] = remote.injected
    totals["acknowledged_writes"] = ledger.acks
    rates = [r["ops_per_s"] for r in totals["periods"] if r.get("ops_per_s")]
    totals["ops_per_s_min"] = min(rates) if rates else None
    totals["ops_per_s_median"] = sorted(rates)[len(rates) // 2] if rates else None
    print("soak: %d periods, %d power cuts, %d kill -9 and %d kill -9 of the server survived; "
          "%d acknowledged writes, %d lost; loadgen %s ops/s median (%s min); final verify %s"
          % (len(totals["periods"]), totals["power_cuts"], totals["kill9"], totals["server_kill9"],
             ledger.acks, totals["lost"],
             totals["ops_per_s_median"], totals["ops_per_s_min"],
             "clean" if totals["final_verify_ok"] else "FAILED"), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(totals, f, indent=1)
    return 0 if totals["lost"] == 0 and totals["final_verify_ok"] and not totals["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
