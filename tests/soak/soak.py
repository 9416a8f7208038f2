#!/usr/bin/env python3
"""The soak: a long run of load and faults (not part of ./scripts/check).

    tests/soak/soak.py [--minutes 30] [--clients 16] [--period 90] [--seed N]
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


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--period", type=float, default=90, help="seconds between faults, on average")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default=None, help="also write the totals here")
    return ap.parse_args()


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
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import cairntest as ct
    import test_powercut as tp

    reason = tp.skip_reason()
    if reason:
        print("soak: cannot run: %s" % reason, file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    print("soak: seed %d, %.0f minutes, %d loadgen clients, a fault every ~%.0f s"
          % (seed, args.minutes, args.clients, args.period), file=sys.stderr)

    # test_powercut.PowerCuts' methods do the cut, the rebuild-free checks
    # and the daemon's config; borrow them on a bare instance.
    cuts = tp.PowerCuts("test_acknowledged_writes_survive_power_cuts")
    cleanups = Cleanups()
    cuts.addCleanup = cleanups.addCleanup
    cuts.rng = rng
    cuts.base = ct.make_tempdir(None, prefix="cairn-soak-")
    totals = {"seed": seed, "minutes": args.minutes, "clients": args.clients, "periods": [],
              "power_cuts": 0, "kill9": 0, "acknowledged_writes": 0, "lost": 0, "problems": []}
    try:
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
            fault = "power cut" if n % 2 == 0 else "kill -9"
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
            else:
                d.proc.kill()
                d.proc.wait()
                totals["kill9"] += 1
            work.join()
            found = list(work.errors) + cuts.problems(d, ledger)
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
        p = d.cli("--json", "verify", check_exit=None, timeout=600)
        totals["final_verify"] = p.stdout.decode(errors="replace").strip()[-500:]
        totals["final_verify_ok"] = p.returncode == 0
        d.stop()
    finally:
        cleanups.run()
    totals["acknowledged_writes"] = ledger.acks
    rates = [r["ops_per_s"] for r in totals["periods"] if r.get("ops_per_s")]
    totals["ops_per_s_min"] = min(rates) if rates else None
    totals["ops_per_s_median"] = sorted(rates)[len(rates) // 2] if rates else None
    print("soak: %d periods, %d power cuts and %d kill -9 survived; %d acknowledged writes, %d lost; "
          "loadgen %s ops/s median (%s min); final verify %s"
          % (len(totals["periods"]), totals["power_cuts"], totals["kill9"], ledger.acks, totals["lost"],
             totals["ops_per_s_median"], totals["ops_per_s_min"],
             "clean" if totals["final_verify_ok"] else "FAILED"), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(totals, f, indent=1)
    return 0 if totals["lost"] == 0 and totals["final_verify_ok"] and not totals["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
