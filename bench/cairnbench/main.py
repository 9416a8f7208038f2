"""bench/run: command line, suite selection, and the run loop."""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback

from . import env, procs, report

SUITES = ["crud", "multiclient", "backends", "search", "ingest", "mount", "shared", "encryption",
          "growth"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_t0 = time.monotonic()


def log(msg):
    sys.stderr.write("[%6.1fs] %s\n" % (time.monotonic() - _t0, msg))
    sys.stderr.flush()


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="Runs cairn's benchmark suites against peers measured in the same run.")
    p.add_argument("suites", nargs="*", metavar="SUITE",
                   help="suites to run (default: all): " + ", ".join(SUITES))
    p.add_argument("--tier", choices=sorted(env.TIERS), default="quick",
                   help="smoke: toy sizes, well under a minute; quick: a few minutes "
                        "(default); full: under an hour")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"),
                   help="meson build directory with cairnd, cairn and the bench binaries "
                        "(default: build/)")
    p.add_argument("--out", help="results directory (default: bench/results, or a temporary "
                                 "directory for the smoke tier)")
    p.add_argument("--no-install", action="store_true",
                   help="do not install missing peer packages (they are skipped instead)")
    p.add_argument("--tap", action="store_true", help="print TAP, one test per suite, on stdout")
    p.add_argument("--keep-tmp", action="store_true", help="keep the scratch directory")
    args = p.parse_args(argv)
    for s in args.suites:
        if s not in SUITES:
            p.error("unknown suite %r (choose from %s)" % (s, ", ".join(SUITES)))
    return args


def run_suite(name, ctx):
    result = report.SuiteResult(name, ctx)
    module = importlib.import_module("cairnbench.suite_" + name)
    t0 = time.monotonic()
    try:
        module.run(ctx, result, log)
    except procs.Skip as e:
        result.status = "skipped"
        result.error = str(e)
        result.note(str(e))
    except procs.SuiteError as e:
        result.status = "failed"
        result.error = str(e)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a bug in the suite or a tool that crashed it
        result.status = "crashed"
        result.error = "%s: %s" % (type(e).__name__, e)
        result.data["traceback"] = traceback.format_exc()
        log(traceback.format_exc())
    finally:
        procs.stop_all_servers()
        result.seconds = time.monotonic() - t0
        result.loadavg["end"] = report.loadavg()
    return result


def main(argv):
    args = parse_args(argv)
    suites = args.suites or SUITES
    procs.install_signal_handlers()
    out = args.out
    throwaway = False
    if not out:
        # Smoke numbers mean nothing; they are thrown away unless --out asks for them.
        throwaway = args.tier == "smoke" and not args.keep_tmp
        out = (tempfile.mkdtemp(prefix="cairn-bench-smoke-") if args.tier == "smoke"
               else os.path.join(REPO, "bench", "results"))
    ctx = env.Context(args.tier, args.build_dir, out, keep_tmp=args.keep_tmp)
    missing = ctx.missing_binaries()
    if missing:
        sys.stderr.write("bench/run: not built: %s (run: ninja -C %s)\n"
                         % (", ".join(missing), args.build_dir))
        ctx.cleanup()
        return 1
    if not args.no_install:
        still = env.install_missing(log)
        if still:
            log("peers not installed, their comparisons are skipped: " + " ".join(still))
    machine = env.machine_info(ctx.tmp)
    versions = env.tool_versions()
    versions["cairn"] = env.source_version(REPO)
    log("tier %s, suites %s, results in %s" % (args.tier, " ".join(suites), out))

    results = []
    if args.tap:
        print("TAP version 13")
        print("1..%d" % len(suites))
        sys.stdout.flush()
    try:
        for i, name in enumerate(suites, 1):
            log("suite %s" % name)
            result = run_suite(name, ctx)
            results.append(result)
            report.write_suite(result, out, machine, versions)
            log("suite %s: %s in %.1f s%s" % (name, result.status, result.seconds,
                                             (": " + result.error) if result.error else ""))
            for t in result.targets:
                log("  target %-60s %s -> %s" % (t["target"], t["measured"],
                                                 report.met_text(t["met"])))
            if args.tap:
                if result.failed:
                    print("not ok %d - %s: %s" % (i, name, (result.error or "").replace("\n", " ")))
                elif result.status == "skipped":
                    print("ok %d - %s # SKIP %s" % (i, name, result.error))
                else:
                    print("ok %d - %s" % (i, name))
                sys.stdout.flush()
        report.write_summary(results, out, machine, versions, args.tier)
    except KeyboardInterrupt:
        log("interrupted: stopping every server started")
        procs.stop_all_servers()
        ctx.cleanup()
        return 130
    finally:
        procs.stop_all_servers()
    ctx.cleanup()
    failed = [r.suite for r in results if r.failed]
    if throwaway:
        shutil.rmtree(out, ignore_errors=True)
        out = "(smoke results discarded; --out DIR keeps them)"
    log("results: %s%s" % (out, ("; FAILED: " + " ".join(failed)) if failed else ""))
    return 1 if failed else 0
