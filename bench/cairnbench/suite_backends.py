"""backends: the object backend layer alone, per backend.

The local, sftp, s3, r2 and azure backends are measured. bench/backend-bench drives
storage/ directly on a libuv loop
(no daemon, no protocol, no compression), one operation at a time, and does
the same work with plain system calls in the same process ("raw": write a
temporary file, fsync, rename, fsync the directory - what the backend promises
for a put). Process-level peers do it from the shell: `cp` + `sync` (file and
directory, so the write is as durable), `cat`, `stat`, `ls`, `rm` + `sync`,
and rclone with a local remote, which does not fsync.

The sftp rows (cairnbench/sftp.py) run against an sshd of their own on
127.0.0.1: the backend through backend-bench --url, OpenSSH's sftp client in
batch mode over one connection, and for large files `cairn add` through a
cairnd on that backend against scp and rclone's sftp backend.

The s3 and r2 rows (cairnbench/s3.py) run against the S3 test server of the
integration tests (s3rver behind a SigV4-checking proxy) at each latency
profile: the backend through backend-bench --url, a bare libcurl client
(bench/s3-raw) and rclone with an s3 remote. The azure rows (cairnbench/azure.py)
do the same against Azurite behind the integration tests' proxy: the backend,
bench/az-raw (libcurl, signed with the backend's SharedKey signer) and rclone's
azureblob backend.
"""

import json
import os

from . import azure, charts, common, procs, report, s3, sftp, sshd
from .procs import run_timed

KIB = 1024
MIB = 1024 * 1024


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
    _report_sftp(ctx, result, _run_sftp(ctx, result, log, have_rclone))
    _report_s3(ctx, result, _run_s3(ctx, result, log, have_rclone))
    _report_s3(ctx, result, _run_s3(ctx, result, log, have_rclone, azure), azure)


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


# --- sftp ---------------------------------------------------------------------

SFTP_OPS = [("put", "write 1 MiB (durable)", "write 1 MiB"),
            ("get", "read 1 MiB", "read 1 MiB"),
            ("range", "ranged read 64 KiB (the last 64 KiB of 1 MiB)", "ranged read 64 KiB"),
            ("head", "exists", "exists"),
            ("list_50", "list 50", "list 50"),
            ("delete", "delete", "delete")]
CAIRN_SFTP = "cairn sftp backend"
OPENSSH_SFTP = "OpenSSH sftp -b (one connection)"


def _run_sftp(ctx, result, log, have_rclone):
    """Everything measured against one sshd; a dict for _report_sftp. Its "why"
    says why nothing was measured, "no_backend" why cairn was not."""
    s = ctx.sizes
    out = {"why": sshd.unavailable(), "no_backend": None, "ops": {}, "ops_rss": None,
           "batch": None, "large": {}, "large_size": s["sftp_large"]}
    if out["why"] is None and not (ctx.have("sftp") and ctx.have("scp")):
        out["why"] = "OpenSSH's sftp and scp clients not installed (openssh-client)"
    if out["why"]:
        log("backends: sftp not measured: " + out["why"])
        return out
    size, n, rounds = s["sftp_size"], s["sftp_iterations"], s["sftp_rounds"]
    try:
        server = sshd.Sshd(ctx)
    except procs.Skip as e:
        out["why"] = str(e)
        return out
    with server:
        remote = ctx.mkdtemp("sftp-remote")
        src = os.path.join(ctx.mkdtemp("sftp-src"), "object")
        with open(src, "wb") as f:
            f.write(os.urandom(size))
        cairn = {op: [] for op, _, _ in SFTP_OPS}
        peer = {op: [] for op, _, _ in SFTP_OPS}
        batch = {"total_ms": {op: 0.0 for op, _, _ in SFTP_OPS},
                 "ops": {op: 0 for op, _, _ in SFTP_OPS}, "empty_ms": []}
        peer_ok = True
        for r in range(rounds):
            log("backends: sftp %s x %d, round %d of %d" % (_size_name(size), n, r + 1, rounds))
            for side in (("cairn", "peer") if r % 2 == 0 else ("peer", "cairn")):
                if side == "cairn" and out["no_backend"] is None:
                    try:
                        ops, peak = sftp.backend_round(ctx, server, os.path.join(
                            remote, "be-%d" % r), size, n, n)
                    except sftp.NoBackend as e:
                        out["no_backend"] = "this build has no sftp backend"
                        log("backends: sftp backend not measured: %s" % e)
                        continue
                    for op in cairn:
                        cairn[op] += ops[op]
                    out["ops_rss"] = max(out["ops_rss"] or 0, peak)
                elif side == "peer" and peer_ok:
                    try:
                        smp, totals, counts, empty = sftp.peer_round(
                            ctx, server, os.path.join(remote, "peer-%d" % r), src, size, n, n)
                    except sftp.PeerError as e:
                        result.note("OpenSSH sftp failed, not compared: %s" % e)
                        peer_ok = False
                        continue
                    for op in peer:
                        peer[op] += smp[op]
                        # Every batch pays the connection once; the empty batch is that cost.
                        batch["total_ms"][op] += totals[op] - empty
                        batch["ops"][op] += counts[op]
                    batch["empty_ms"].append(empty)
            server.check_alive()
        if out["no_backend"] is None:
            out["ops"][CAIRN_SFTP] = cairn
        if peer_ok:
            out["ops"][OPENSSH_SFTP] = peer
            out["batch"] = batch
        procs.remove_tree(os.path.dirname(src))

        size_l, runs = s["sftp_large"], s["sftp_large_runs"]
        log("backends: sftp large file, %s x %d" % (_size_name(size_l), runs))
        env = sftp.rclone_env(ctx, server)
        daemon = None
        if out["no_backend"] is None:
            daemon = procs.Cairnd(ctx, "sftp", config="[backend]\nurl = %s\n"
                                  % server.srv.url(os.path.join(remote, "cairn")))
        try:
            large, notes = sftp.large_files(ctx, server, daemon, size_l, runs, remote,
                                            have_rclone, env, log)
            for note in notes:
                result.note(note)
            out["large"] = large
        except sftp.PeerError as e:
            result.note("large files over sftp not compared: %s" % e)
        finally:
            if daemon:
                out["cairnd_peak_rss_kib"] = daemon.peak_rss_kib()
                daemon.stop()
        server.check_alive()
    return out


def _report_sftp(ctx, result, sf):
    why = sf["why"] or sf["no_backend"]
    ops = sf["ops"]
    if sf["why"]:
        result.note("backend sftp: not measured: %s%s" % (sf["why"], (
            " (%s; bench/run does not install the Debian package openssh-server, which "
            "would start a system sshd)" % sshd.SSHD) if sf["why"] == "sshd not installed"
            else ""))
    elif sf["no_backend"]:
        result.note("backend sftp: %s; only its peers were measured" % sf["no_backend"])
    if ops:
        size = ctx.sizes["sftp_size"]
        t = result.table(
            "sftp: one operation at a time, %s objects, over one open connection"
            % _size_name(size),
            ["operation", "tool", "runs", "mean ms", "median ms", "p95 ms", "MB/s (median)",
             "batch ms/op", "cairn ÷ sftp (median)"],
            "Both against the same sshd on 127.0.0.1 (OpenSSH, `internal-sftp`), alternating "
            "round by round. cairn: backend-bench --url sftp://..., each operation timed "
            "alone on an open connection. OpenSSH sftp: one `sftp -b` batch per kind of "
            "operation, each command timed from its echo to the next one's; *batch ms/op* is "
            "the same cost measured the other way: the batch's wall time less that of an "
            "empty batch (connecting: %s ms on average), over its operations - a cross-check "
            "only, and meaningless for cheap operations: connecting varies by more than a "
            "batch of them costs. Writes: `put -f` "
            "(fsync@openssh.com) to a temporary name, then `rename` into place. Ranged read: "
            "`reget` into a local file as long as the object less 64 KiB, so sftp fetches "
            "only the last 64 KiB (it has no other ranged read); the backend reads the same "
            "range. Exists: `ls -l FILE`; list: `ls -l DIR` of 50 objects of 1 KiB "
            "(the backend's list returns keys with sizes); delete: `rm`."
            % (report.fmt(report.mean(sf["batch"]["empty_ms"])) if sf.get("batch") else "n/a"))
        for op, label, _ in SFTP_OPS:
            base = ops.get(OPENSSH_SFTP, {}).get(op)
            base_st = common.summarize(base) if base else None
            for tool in (CAIRN_SFTP, OPENSSH_SFTP):
                if tool not in ops:
                    continue
                st = common.summarize(ops[tool][op])
                nbytes = {"put": size, "get": size, "range": sftp.RANGE}.get(op)
                mbs = nbytes / (st["median"] / 1000.0) / 1e6 if nbytes else None
                per_op = "-"
                if tool == OPENSSH_SFTP and sf.get("batch") and sf["batch"]["ops"][op]:
                    per_op = sf["batch"]["total_ms"][op] / sf["batch"]["ops"][op]
                t.add(label, tool, st["n"], st["mean"], st["median"], st["p95"],
                      mbs if mbs is not None else "-", per_op,
                      report.fmt_ratio(report.ratio(st["median"], base_st["median"]))
                      if base_st and tool != OPENSSH_SFTP else "-")
        if sf.get("ops_rss"):
            result.note("backend-bench against sftp: peak RSS %s (it holds the %s object it "
                        "writes)" % (report.fmt_bytes(sf["ops_rss"] * 1024), _size_name(size)))
    for op, _, short in SFTP_OPS:
        name = "backends sftp: %s at most 1.1x OpenSSH sftp (median)" % short
        if CAIRN_SFTP in ops and OPENSSH_SFTP in ops:
            c = report.median(ops[CAIRN_SFTP][op])
            p = report.median(ops[OPENSSH_SFTP][op])
            r = report.ratio(c, p)
            result.target(name, "%s (%s vs %s ms)" % (report.fmt_ratio(r), report.fmt(c),
                                                      report.fmt(p)), r <= 1.1)
        else:
            result.target(name, "not measured: " + (why or "OpenSSH sftp failed"), None)

    large, size_l = sf["large"], sf["large_size"]
    label = _size_name(size_l)
    if large:
        mbs = {tool: size_l / report.median(sec) / 1e6 for tool, sec in large.items() if sec}
        c = mbs.get("cairn add")
        lt = result.table(
            "sftp: one large file (%s of random bytes) to the same sshd" % label,
            ["tool", "runs", "median s", "MB/s (median)", "cairn ÷ tool (MB/s)"],
            "Whole commands, timed from spawn to exit; a new file in each run (cairn would "
            "otherwise find it stored already), the tools' order rotating from run to run, "
            "and a sync(2) before each, untimed, so none flushes what another wrote. "
            "`cairn add FILE`: the CLI through a cairnd whose backend is the sftp URL - "
            "chunking, hashing, compression attempts and packs included - and acknowledged "
            "once durable (each pack put is fsynced on the server). `scp` (OpenSSH's, over the "
            "SFTP protocol by default since 9.0) and `rclone copyto` to an sftp remote (set up "
            "through RCLONE_CONFIG_* variables, defaults otherwise) do not fsync.")
        for tool in ("cairn add", "scp", "rclone copyto"):
            if tool in large and large[tool]:
                lt.add(tool if tool != "rclone copyto" else "rclone copyto (sftp remote)",
                       len(large[tool]), report.median(large[tool]), mbs[tool],
                       report.fmt_ratio(report.ratio(c, mbs[tool])) if c else "n/a")
        if sf.get("cairnd_peak_rss_kib"):
            result.note("cairnd with the sftp backend: peak RSS %s after the large files"
                        % report.fmt_bytes(sf["cairnd_peak_rss_kib"] * 1024))
    name = "backends sftp: large file (%s) at least 0.8x scp (MB/s)" % label
    if large.get("cairn add") and large.get("scp"):
        r = report.ratio(mbs["cairn add"], mbs["scp"])
        result.target(name, "%s (%s vs %s MB/s)" % (report.fmt_ratio(r), report.fmt(
            mbs["cairn add"]), report.fmt(mbs["scp"])), r >= 0.8)
    else:
        result.target(name, "not measured: " + (why or "scp failed"), None)
    name = "backends sftp: large file (%s) faster than rclone (sftp)" % label
    if large.get("cairn add") and large.get("rclone copyto"):
        r = report.ratio(mbs["cairn add"], mbs["rclone copyto"])
        result.target(name, "%s (%s vs %s MB/s)" % (report.fmt_ratio(r), report.fmt(
            mbs["cairn add"]), report.fmt(mbs["rclone copyto"])), r > 1.0)
    else:
        result.target(name, "not measured: " + (why or "rclone not installed or failed"), None)
    result.data["sftp"] = {k: v for k, v in sf.items()}


# --- s3 and r2 ----------------------------------------------------------------

S3_OPS = [("put", "write 1 MiB"), ("get", "read 1 MiB"),
          ("range", "ranged read 64 KiB (the last 64 KiB of 1 MiB)"), ("head", "exists (HEAD)"),
          ("list_50", "list 50"), ("delete", "delete")]
S3_SHORT = {"put": "write 1 MiB", "get": "read 1 MiB", "range": "ranged read 64 KiB",
            "head": "exists", "list_50": "list 50", "delete": "delete"}
LIBCURL = "libcurl (bench/s3-raw)"
RCLONE_S3 = "rclone (s3 remote)"


def _cairn_s3(kind):
    return "cairn %s backend" % kind


def _run_s3(ctx, result, log, have_rclone, mod=s3):
    """Every s3 and r2 row against one S3 server (with mod=azure: the azure rows
    against one Azurite); a dict for _report_s3. Its "why" says why nothing was
    measured, "rclone_why" why rclone was not."""
    libcurl, rclone = _peers(mod)
    s = ctx.sizes
    out = {"why": mod.unavailable(), "rclone_why": None if have_rclone else
           "rclone not installed", "rows": {}, "rss": {}}
    if out["why"]:
        log("backends: %s not measured: %s" % (" and ".join(mod.BACKENDS), out["why"]))
        return out
    n = s["s3_iterations"]
    try:
        server = mod.Fixture(ctx)
    except procs.Skip as e:
        out["why"] = str(e)
        return out
    with server:
        src = os.path.join(ctx.mkdtemp("s3-src"), "object")
        with open(src, "wb") as f:
            f.write(os.urandom(mod.SIZE))
        for kind in mod.BACKENDS:
            cairn = _cairn_s3(kind)
            rc_env = None
            if out["rclone_why"] is None:
                try:
                    rc_env = mod.rclone_env(ctx, server, kind, "rc-%s/" % kind)
                    mod.rclone_prepare(ctx, rc_env, "rc-%s/" % kind)
                except mod.PeerError as e:
                    out["rclone_why"] = str(e)
                    result.note("rclone failed, not compared: %s" % e)
            for profile in s["s3_profiles"]:
                server.profile(profile)
                tools = [cairn, libcurl] + ([rclone] if rc_env else [])
                smp = {tool: {op: [] for op in mod.OPS} for tool in tools}
                # At clean a request takes a millisecond or so and the test server's own
                # latency moves by half between rounds: more rounds, as cheap as they are.
                rounds = s.get("s3_clean_rounds", s["s3_rounds"]) if profile == "clean" else s["s3_rounds"]
                for r in range(rounds):
                    log("backends: %s at %s, %d x %d, round %d of %d"
                        % (kind, profile, n, len(mod.OPS), r + 1, rounds))
                    # The order rotates from round to round, so drift hits every tool alike.
                    for tool in tools[r % len(tools):] + tools[:r % len(tools)]:
                        peak = None
                        # cairn and raw libcurl work under the same prefix in a round, so
                        # they list the same 50 objects: how long Azurite takes to list a
                        # set depends on the set (put when, in what order), not on the
                        # client - a list of one set took 5.47 ms by cairn and 5.33 by raw
                        # libcurl, of another 6.63 and 6.42. Each deletes its own objects.
                        if tool == cairn:
                            ops, peak = mod.backend_round(ctx, server, kind,
                                                         "be-%s-%s-%d/" % (kind, profile, r), n)
                        elif tool == libcurl:
                            ops, peak = mod.raw_round(ctx, server, kind,
                                                     "be-%s-%s-%d/" % (kind, profile, r), n)
                        elif tool in smp:
                            try:
                                ops = mod.rclone_round(ctx, rc_env, "rc-%s/" % kind, src, n)
                            except mod.PeerError as e:
                                out["rclone_why"] = str(e)
                                result.note("rclone failed, not compared: %s" % e)
                                del smp[tool]
                                rc_env = None
                                continue
                        else:
                            continue
                        for op in mod.OPS:
                            smp[tool][op] += ops[op]
                        if peak:
                            out["rss"][(kind, tool)] = max(out["rss"].get((kind, tool), 0), peak)
                    server.check_alive()
                out["rows"][(kind, profile)] = smp
        procs.remove_tree(os.path.dirname(src))
    return out


def _peers(mod):
    """The labels of the raw libcurl peer and of rclone for the rows of `mod`."""
    if mod is s3:
        return LIBCURL, RCLONE_S3
    return mod.LIBCURL, mod.RCLONE


def _caption(mod, kind):
    if mod is not s3:
        return mod.caption(kind)
    return (
        "All against one S3 server on 127.0.0.1 (tests/s3/server.js: s3rver behind a "
        "proxy that checks every SigV4 signature and x-amz-content-sha256), whose proxy "
        "waits 0, 20, 50 or 100 ms (clean, rtt20, rtt50, rtt100) before forwarding each "
        "request; tools alternate round by round. cairn: backend-bench --url %s://... "
        "(storage's backend_* API, opened before the clock starts). libcurl: bench/s3-raw, "
        "one curl easy handle kept alive, CURLOPT_AWS_SIGV4, x-amz-content-sha256 of the "
        "body. rclone: whole commands (its start-up included) with an s3 remote set up "
        "through RCLONE_CONFIG_CBS3_* (provider Other, path style, no bucket check): "
        "`copyto`, `cat`, `cat --offset --count`, `lsf FILE`, `lsjson --no-modtime "
        "--no-mimetype DIR` (keys and sizes, as the backend's list), `deletefile`.%s"
        % (kind, " r2: the backend takes temporary credentials from the fixture's "
           "stand-in for Cloudflare's API and signs with their session token; the peers "
           "use temporary credentials from the same API." if kind == "r2" else ""))


def _report_s3(ctx, result, so, mod=s3):
    profiles = ctx.sizes["s3_profiles"]
    libcurl, rclone = _peers(mod)
    for kind in mod.BACKENDS:
        cairn = _cairn_s3(kind)
        if so["why"]:
            result.note("backend %s: not measured: %s" % (kind, so["why"]))
            for op, short in S3_SHORT.items():
                for peer in ("raw libcurl", "rclone"):
                    result.target("backends %s: %s %s %s (median, every profile)" % (
                        kind, short, "at most 1.1x" if peer == "raw libcurl" else "faster than",
                        peer), "not measured: " + so["why"], None)
            continue
        t = result.table(
            "%s: one operation at a time, 1 MiB objects, by latency profile" % kind,
            ["profile", "operation", "tool", "runs", "mean ms", "median ms", "p95 ms",
             "MB/s (median)", "cairn ÷ libcurl (median)", "cairn ÷ rclone (median)"],
            _caption(mod, kind))
        for profile in profiles:
            smp = so["rows"].get((kind, profile))
            if not smp:
                continue
            for op, label in S3_OPS:
                c = report.median(smp[cairn][op])
                for tool in (cairn, libcurl, rclone):
                    if tool not in smp:
                        continue
                    st = common.summarize(smp[tool][op])
                    nbytes = {"put": mod.SIZE, "get": mod.SIZE, "range": mod.RANGE}.get(op)
                    mbs = nbytes / (st["median"] / 1000.0) / 1e6 if nbytes else "-"
                    ratios = ["-", "-"]
                    if tool == cairn:
                        ratios = [report.fmt_ratio(report.ratio(c, report.median(smp[p][op])))
                                  if p in smp else "n/a" for p in (libcurl, rclone)]
                    t.add(profile, label, tool, st["n"], st["mean"], st["median"], st["p95"],
                          mbs, *ratios)
        rss = ["%s %s" % (tool, report.fmt_bytes(kib * 1024))
               for (k, tool), kib in sorted(so["rss"].items()) if k == kind and kib]
        if rss:
            result.note("%s: peak RSS of the in-process tools (each holds the 1 MiB object it "
                        "writes): %s" % (kind, ", ".join(rss)))
        for op, short in S3_SHORT.items():
            for peer, tool, limit in (("raw libcurl", libcurl, 1.1), ("rclone", rclone, 1.0)):
                name = "backends %s: %s %s %s (median, every profile)" % (
                    kind, short, "at most 1.1x" if limit == 1.1 else "faster than", peer)
                per = []
                for profile in profiles:
                    smp = so["rows"].get((kind, profile), {})
                    if tool in smp and cairn in smp:
                        per.append((profile, report.ratio(report.median(smp[cairn][op]),
                                                          report.median(smp[tool][op]))))
                if len(per) < len(profiles):
                    why = so["rclone_why"] if tool == rclone else None
                    result.target(name, "not measured: " + (why or "the peer failed"), None)
                    continue
                worst = max(per, key=lambda pr: pr[1])
                ok = all(r <= limit if limit == 1.1 else r < limit for _, r in per)
                result.target(name, "worst %s at %s (%s)" % (
                    report.fmt_ratio(worst[1]), worst[0],
                    ", ".join("%s %s" % (p, report.fmt_ratio(r)) for p, r in per)), ok)
    result.data[mod.BACKENDS[0] if mod is not s3 else "s3"] = {
        "why": so["why"], "rclone_why": so["rclone_why"],
        "rows": {"%s/%s" % k: v for k, v in so["rows"].items()},
        "peak_rss_kib": {"%s/%s" % k: v for k, v in so["rss"].items()}}
