"""backends: the object backend layer alone, per backend.

Only the local backend exists in this build; S3, R2 and SFTP are reported as
not available. bench/backend-bench drives storage/ directly on a libuv loop
(no daemon, no protocol, no compression), one operation at a time, and does
the same work with plain system calls in the same process ("raw": write a
temporary file, fsync, rename, fsync the directory - what the backend promises
for a put). Process-level peers do it from the shell: `cp` + `sync` (file and
directory, so the write is as durable), `cat`, `stat`, `ls`, `rm` + `sync`,
and rclone with a local remote, which does not fsync.
"""

import json
import os

from . import charts, common, procs, report
from .procs import run_timed

KIB = 1024
MIB = 1024 * 1024
UNAVAILABLE = ["s3", "r2", "sftp"]


def _max(values):
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _size_name(n):
    return "%d MiB" % (n // MIB) if n >= MIB else "%d KiB" % (n // KIB)


def _backend_bench(ctx, size, iterations, list_too):
    """The backend and raw system calls, alternating operation by operation."""
    root = ctx.mkdtemp("be-%d" % size)
    argv = [ctx.bin["backend-bench"], "--root", os.path.join(root, "store"), "--size",
            str(size), "--iterations", str(iterations), "--mode", "both"]
    if list_too:
        argv.append("--list")
    r = run_timed(argv, capture=True, timeout=1800)
    if r.returncode != 0:
        raise procs.SuiteError("backend-bench --size %d failed (%s): %s"
                               % (size, r.returncode, r.stderr.strip()[-300:]))
    data = json.loads(r.stdout)
    procs.remove_tree(root)
    return data


def _shell_peers(ctx, size, iterations, src):
    """cp+sync, cat, stat, rm+sync on files of `size` bytes; ms samples and peak RSS."""
    d = ctx.mkdtemp("peer-%d" % size)
    out = {"put": [], "get": [], "head": [], "delete": []}
    rss = {"put": 0, "get": 0}
    for i in range(iterations):
        dst = os.path.join(d, "o%06d" % i)
        a = procs.check_ok(run_timed(["cp", src, dst]), "cp")
        b = procs.check_ok(run_timed(["sync", dst, d]), "sync")
        out["put"].append(a.ms + b.ms)
    for i in range(iterations):
        r = procs.check_ok(run_timed(["cat", os.path.join(d, "o%06d" % i)]), "cat")
        out["get"].append(r.ms)
    # Peak RSS from one more untimed run of each: measuring it costs a spawn of its own.
    rss["put"] = run_timed(["cp", src, os.path.join(d, "rss")], rss=True).maxrss_kib
    rss["get"] = run_timed(["cat", os.path.join(d, "rss")], rss=True).maxrss_kib
    os.unlink(os.path.join(d, "rss"))
    for i in range(iterations):
        out["head"].append(procs.check_ok(
            run_timed(["stat", "-c", "%s", os.path.join(d, "o%06d" % i)]), "stat").ms)
    for i in range(iterations):
        a = procs.check_ok(run_timed(["rm", os.path.join(d, "o%06d" % i)]), "rm")
        b = procs.check_ok(run_timed(["sync", d]), "sync")
        out["delete"].append(a.ms + b.ms)
    procs.remove_tree(d)
    return out, rss


def _rclone_peers(ctx, size, iterations, src, env):
    d = ctx.mkdtemp("rclone-%d" % size)
    out = {"put": [], "get": [], "head": [], "delete": []}
    rss = {"put": 0, "get": 0}
    for i in range(iterations):
        r = run_timed(["rclone", "copyto", src, os.path.join(d, "o%06d" % i)], env=env)
        if r.returncode != 0:
            raise RuntimeError("rclone copyto: " + r.stderr.strip()[-200:])
        out["put"].append(r.ms)
    for i in range(iterations):
        r = run_timed(["rclone", "cat", os.path.join(d, "o%06d" % i)], env=env)
        out["get"].append(r.ms)
    rss["put"] = run_timed(["rclone", "copyto", src, os.path.join(d, "rss")], env=env,
                           rss=True).maxrss_kib
    rss["get"] = run_timed(["rclone", "cat", os.path.join(d, "rss")], env=env,
                           rss=True).maxrss_kib
    for i in range(iterations):
        out["head"].append(run_timed(["rclone", "lsf", os.path.join(d, "o%06d" % i)],
                                     env=env).ms)
    for i in range(iterations):
        out["delete"].append(run_timed(["rclone", "deletefile", os.path.join(d, "o%06d" % i)],
                                       env=env).ms)
    procs.remove_tree(d)
    return out, rss


def _list_peers(ctx, iterations, env, with_rclone):
    """`ls` (and `rclone lsf`) of directories holding 50 and 1,000 files."""
    out = {}
    for n in (50, 1000):
        d = ctx.mkdtemp("ls-%d" % n)
        for i in range(n):
            open(os.path.join(d, "o%06d" % i), "wb").close()
        out[("ls", n)] = [run_timed(["ls", d]).ms for _ in range(iterations)]
        if with_rclone:
            out[("rclone lsf", n)] = [run_timed(["rclone", "lsf", d], env=env).ms
                                      for _ in range(iterations)]
        procs.remove_tree(d)
    return out


def run(ctx, result, log):
    s = ctx.sizes
    have_rclone = ctx.have("rclone")
    rclone_env = dict(os.environ, RCLONE_CONFIG=os.path.join(ctx.tmp, "rclone.conf"))
    if have_rclone:
        open(rclone_env["RCLONE_CONFIG"], "w").close()
    else:
        result.note("rclone is not installed: the rclone comparison is not measured")
    for name in UNAVAILABLE:
        result.note("backend %s: not available in this build (only `local` exists); skipped"
                    % name)

    rows = {}  # (size, tool) -> {op: stats}
    rss = {}
    for size, iterations in s["be_sizes"]:
        log("backends: %s x %d" % (_size_name(size), iterations))
        src = os.path.join(ctx.mkdtemp("src"), "object")
        with open(src, "wb") as f:
            f.write(os.urandom(size))
        list_too = size == s["be_sizes"][0][0]
        data = _backend_bench(ctx, size, iterations, list_too)
        for mode, tool in (("backend", "cairn local backend"),
                           ("raw", "raw syscalls (in-process)")):
            rows[(size, tool)] = {op: common.summarize(v)
                                  for op, v in data["modes"][mode].items()}
            # One process ran both: its peak covers the object buffer and both modes.
            rss[(size, tool)] = data["peak_rss_kib"]
        peer_iter = min(iterations, s["be_peer_iterations"]) if size >= MIB else iterations
        shell, shell_rss = _shell_peers(ctx, size, peer_iter, src)
        rows[(size, "cp+sync / cat / stat / rm+sync")] = {
            op: common.summarize(v) for op, v in shell.items()}
        rss[(size, "cp+sync / cat / stat / rm+sync")] = _max(shell_rss.values())
        if have_rclone:
            try:
                rc, rc_rss = _rclone_peers(ctx, size, peer_iter, src, rclone_env)
                rows[(size, "rclone (local remote)")] = {
                    op: common.summarize(v) for op, v in rc.items()}
                rss[(size, "rclone (local remote)")] = _max(rc_rss.values())
            except RuntimeError as e:
                result.note("rclone failed, not compared: %s" % e)
                have_rclone = False
        procs.remove_tree(os.path.dirname(src))
    lists = _list_peers(ctx, s["be_list_iterations"], rclone_env, have_rclone)
    _report(ctx, result, rows, rss, lists)


def _report(ctx, result, rows, rss, lists):
    s = ctx.sizes
    sizes = [size for size, _ in s["be_sizes"]]
    tools = ["cairn local backend", "raw syscalls (in-process)",
             "cp+sync / cat / stat / rm+sync", "rclone (local remote)"]
    base = "cairn local backend"
    for op, label in (("put", "write (durable)"), ("get", "read"), ("head", "exists"),
                      ("delete", "delete")):
        t = result.table(
            "%s, one at a time" % label,
            ["size", "tool", "runs", "mean ms", "median ms", "MB/s (mean)", "peak RSS",
             "tool ÷ cairn (mean time)"],
            None if op != "put" else "Every write ends durable (fsync of file and directory) "
            "except rclone's. The backend and raw rows come from one backend-bench process "
            "that alternates them operation by operation; its peak RSS includes the object "
            "it writes from (the backend API takes whole objects).")
        for size in sizes:
            b = rows.get((size, base), {}).get(op)
            for tool in tools:
                st = rows.get((size, tool), {}).get(op)
                if not st:
                    continue
                mbs = size / (st["mean"] / 1000.0) / 1e6 if op in ("put", "get") else None
                t.add(_size_name(size), tool, st["n"], st["mean"], st["median"],
                      mbs if mbs is not None else "-",
                      report.fmt_bytes(rss[(size, tool)] * 1024)
                      if op in ("put", "get") and rss.get((size, tool)) else "-",
                      report.fmt_ratio(report.ratio(st["mean"], b["mean"])) if b else "n/a")
    lt = result.table("list", ["objects", "tool", "runs", "mean ms", "median ms",
                               "tool ÷ cairn (mean time)"],
                      "The backend lists one directory and returns a sorted page of keys "
                      "with their sizes (a stat per key); raw reads the directory and keeps "
                      "the names; ls prints them.")
    small = sizes[0]
    for n in (50, 1000):
        key = "list_%d" % n
        b = rows.get((small, base), {}).get(key)
        for tool in ("cairn local backend", "raw syscalls (in-process)"):
            st = rows.get((small, tool), {}).get(key)
            if st:
                lt.add(n, tool, st["n"], st["mean"], st["median"],
                       report.fmt_ratio(report.ratio(st["mean"], b["mean"])))
        for tool in ("ls", "rclone lsf"):
            if (tool, n) in lists:
                st = common.summarize(lists[(tool, n)])
                lt.add(n, tool, st["n"], st["mean"], st["median"],
                       report.fmt_ratio(report.ratio(st["mean"], b["mean"])) if b else "n/a")

    # Targets: backend within 1.1x of raw, and faster than rclone, for writes and reads.
    for op, label in (("put", "write"), ("get", "read")):
        worst, where = None, None
        for size in sizes:
            r = report.ratio(rows[(size, base)][op]["mean"],
                             rows[(size, "raw syscalls (in-process)")][op]["mean"])
            if worst is None or r > worst:
                worst, where = r, _size_name(size)
        result.target("backends local: %s at most 1.1x raw (every size)" % label,
                      "worst %s at %s" % (report.fmt_ratio(worst), where), worst <= 1.1)
        if any((size, "rclone (local remote)") in rows for size in sizes):
            slower = [
                _size_name(size) for size in sizes
                if (size, "rclone (local remote)") in rows and
                rows[(size, base)][op]["mean"] >= rows[(size, "rclone (local remote)")][op]["mean"]]
            result.target("backends local: %s faster than rclone (every size)" % label,
                          "slower at " + ", ".join(slower) if slower else "faster at every size",
                          not slower)
        else:
            result.target("backends local: %s faster than rclone" % label,
                          "rclone not measured", None)
    for name in UNAVAILABLE:
        result.target("backends %s: all of the above" % name, "not available in this build",
                      None)

    result.data["rows"] = {"%d/%s" % k: v for k, v in rows.items()}
    result.data["peak_rss_kib"] = {"%d/%s" % k: v for k, v in rss.items()}
    for op, label in (("put", "write"), ("get", "read")):
        series = {}
        for tool in tools:
            pts = [(size / KIB, size / (rows[(size, tool)][op]["mean"] / 1000.0) / 1e6)
                   for size in sizes if (size, tool) in rows and op in rows[(size, tool)]]
            if pts:
                series[tool] = pts
        common.chart(result, ctx, "backends-%s.svg" % label, charts.line_chart,
                     "backends: %s throughput, one object at a time" % label,
                     "object size (KiB)", "MB/s", series, logx=True, logy=True)
