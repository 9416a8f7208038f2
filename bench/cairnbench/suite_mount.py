"""mount: database files queried through `cairn mount`, against the same file
on local disk - and a large `cairn get` from the s3 backend against `cat`.

A user keeps a DuckDB (or SQLite) database in an object store and queries it
where it is, as a local file; the first query pays for fetching what it
reads, the next ones should cost what a local file costs. Here: one SQLite
and one DuckDB database (tests/integration/dbfixture.py: the same two tables
in both, about 100 MiB each in the quick tier), the same queries on each
(aggregates, a join with GROUP BY, a point lookup by primary key, a lookup
through a secondary index), every query in a process of its own, opening
the database read-only, timed inside that process (open + query + reading
every row; SQLite: Python's sqlite3 with mode=ro; DuckDB: @duckdb/node-api
with access_mode READ_ONLY, tests/duckdb/query.js), at each place:

    local file               the file on local disk
    mount, local backend     `cairn mount` of a cairnd with the local backend
    mount, s3 rttN           `cairn mount` of a cairnd whose packs are on the
                             S3 test server (cairnbench/s3.py), with N ms
                             added to every request (rtt20, rtt50)
    mount, azure rttN        the same with the azure backend, on Azurite
                             behind the azure fixture's proxy
                             (cairnbench/azure.py)

each cold (make_cold(): nothing of the file cached on this machine) and
then warm (the same query run again, in a new process). Every answer must
equal the local file's; a wrong one fails the suite. For the remote places
the proxy's count of GETs during each cold run is kept too (the fixtures'
common reset_counters() and gets()).

Last, `cairn get` of a large document of random bytes from the s3 backend
(rtt20) read once before (a warm cache), in GB/s, against `cat FILE >
/dev/null` of the same bytes from local disk, also read once before.
"""

import json
import os
import shutil
import subprocess
import time

from . import azure, procs, report, s3
from .procs import run_timed

MIB = 1024 * 1024
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DBFIXTURE = os.path.join(REPO, "tests", "integration", "dbfixture.py")
ENGINES = [("sqlite", "SQLite"), ("duckdb", "DuckDB")]
LOCAL = "local file"
MOUNT_LOCAL = "mount, local backend"
GET_PROFILE = "rtt20"
WARM_RATIO = 1.2   # warm through the mount, at most this times the local file
COLD_RATIO = 20.0  # cold at rtt50, at most this times the local file cold
COLD_PROFILE = "rtt50"
# The fixture modules of the remote backends with places of their own.
REMOTES = [s3, azure]
GET_TARGET_GBS = 1.0
QUERY_TIMEOUT = 1800


def _db():
    """tests/integration/dbfixture.py, loaded from its path (no sys.path change)."""
    return procs.fixture_module(DBFIXTURE)


def fuse_missing(ctx):
    """Why `cairn mount` cannot run here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the fuse kernel module is not available here)"
    if not shutil.which("fusermount3"):
        return "no fusermount3 (Debian: apt-get install fuse3)"
    r = run_timed([ctx.bin["cairn"], "mount", "--help"], capture=True, timeout=30)
    if r.returncode == 2 and "without FUSE" in r.stderr:
        return "cairn was built without libfuse3 (Debian: apt-get install libfuse3-dev)"
    return None


def drop_page_cache(path):
    """Writes back and evicts the file's pages from the kernel's page cache
    (posix_fadvise DONTNEED), so its next read comes from the disk. Only this
    file: dropping every cache of the machine would slow whoever else is on it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_tree_page_cache(root):
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                drop_page_cache(path)


def resident_bytes(path):
    """Bytes of the file in the page cache (util-linux fincore), or None."""
    if not shutil.which("fincore"):
        return None
    r = run_timed(["fincore", "--bytes", "--noheadings", "--output", "RES", path], capture=True,
                  timeout=60)
    try:
        return int(r.stdout.strip())
    except ValueError:
        return None


class Mount(procs.Server):
    """`cairn mount -f MOUNTPOINT` of a cairnd; stop() unmounts and waits for it."""

    name = "cairn mount"

    def __init__(self, daemon, mountpoint):
        super().__init__()
        self.daemon = daemon
        self.mountpoint = mountpoint
        self.log_path = mountpoint + ".log"

    def start(self, timeout=30):
        os.makedirs(self.mountpoint, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.daemon.cli("mount", "-f", self.mountpoint),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=procs._die_with_parent)
        procs.register_server(self)
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(check=False)
                raise procs.SuiteError("cairn mount did not mount %s: %s"
                                       % (self.mountpoint, procs._tail(self.log_path)))
            time.sleep(0.01)
        return self

    def stop(self, check=True):
        procs.unregister_server(self)
        if not self.proc:
            return
        proc, self.proc = self.proc, None
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            if check:
                raise procs.SuiteError("cairn mount did not exit within 30 s of its unmount")
        if check and proc.returncode != 0:
            raise procs.SuiteError("cairn mount exited with %s at unmount: %s"
                                   % (proc.returncode, procs._tail(self.log_path)))


class Place:
    """Where a database is queried from: the local file, or a mount; for a mount,
    its cairnd, and for a remote backend (s3, azure) its fixture and the
    latency profile."""

    def __init__(self, name, files, daemon=None, mount=None, server=None, profile=None):
        self.name, self.files = name, files  # files: {engine: path}
        self.daemon, self.mount, self.server, self.profile = daemon, mount, server, profile
        self.resident = []  # the local file: bytes still in the page cache after each drop

    def prepare(self):
        if self.server:
            self.server.profile(self.profile)

    def make_cold(self, engine):
        if self.mount:
            make_cold(self.daemon, self.mount)
        else:
            drop_page_cache(self.files[engine])
            self.resident.append(resident_bytes(self.files[engine]))

    def reset_counters(self):
        if self.server:
            self.server.reset_counters()

    def gets(self):
        """The backend's GETs since reset_counters() (the proxy's count), or None."""
        return self.server.gets() if self.server else None


def make_cold(daemon, mount):
    """A cairnd and its mount with nothing of the stored documents cached on
    this machine: unmount (the kernel's page cache of the mounted files goes
    with it), stop cairnd (its memory cache goes), remove DATA_DIR/read-cache
    (cairnd's persistent read cache of remote backends, where there is one),
    evict every file of the data directory from the page cache (with the
    local backend the packs are there), start cairnd, mount again."""
    mount.stop()
    daemon.stop()
    shutil.rmtree(os.path.join(daemon.data_dir, "read-cache"), ignore_errors=True)
    drop_tree_page_cache(daemon.data_dir)
    daemon.start()
    mount.start()


def _sample(engine, place, sql, want):
    """One query in a process of its own: {ms, wall_ms}; a wrong answer is an error."""
    path = place.files[engine]
    r = run_timed(_db().query_argv(engine, path, [sql]), capture=True, timeout=QUERY_TIMEOUT)
    if r.returncode != 0:
        raise procs.SuiteError("%s query on %s (%s) failed (exit %s): %s" % (
            engine, place.name, path, r.returncode, r.stderr.strip()[-400:]))
    out = json.loads(r.stdout)
    res = out["results"][0]
    if want is not None and res["rows"] != want:
        raise procs.SuiteError("%s through %s answered other rows than the local file: %s"
                               % (engine, place.name, sql))
    return {"ms": out["open_ms"] + res["ms"], "open_ms": out["open_ms"], "wall_ms": r.ms,
            "rows": res["rows"]}


def _make_databases(ctx, s, engines, log):
    d = ctx.mkdtemp("db")
    files = {}
    for engine, label in engines:
        path = os.path.join(d, "orders." + engine)
        t0 = time.monotonic()
        if engine == "sqlite":
            _db().make_sqlite(path, s["mount_rows"][engine])
        else:
            _db().make_duckdb(path, s["mount_rows"][engine], timeout=QUERY_TIMEOUT)
        log("mount: %s database, %s rows, %s in %.1f s" % (
            label, "{:,}".format(s["mount_rows"][engine]), report.fmt_bytes(
                os.path.getsize(path)), time.monotonic() - t0))
        files[engine] = path
    return files


def _add(daemon, name, path, what):
    procs.check_ok(run_timed(daemon.cli("add", "-n", name, path), timeout=QUERY_TIMEOUT),
                   "cairn add (%s)" % what)


def _queries(ctx, places, engines, log):
    """{engine: {query: {place: {"cold": [..], "warm": [..], "gets": [..]}}}}, and
    the queries by engine."""
    s = ctx.sizes
    out, asked = {}, {}
    for engine, label in engines:
        qs = [(n, q) for n, q in _db().queries(s["mount_rows"][engine])
              if n in s["mount_queries"]]
        asked[engine] = qs
        out[engine] = {}
        # The answers every place must give: the local file's, all in one process.
        r = run_timed(_db().query_argv(engine, places[0].files[engine], [q for _, q in qs]),
                      capture=True, timeout=QUERY_TIMEOUT)
        procs.check_ok(r, "%s queries on the local file" % engine)
        wants = [res["rows"] for res in json.loads(r.stdout)["results"]]
        for (name, sql), want in zip(qs, wants):
            per = out[engine][name] = {p.name: {"cold": [], "warm": [], "gets": []}
                                       for p in places}
            for rep in range(s["mount_cold_runs"]):
                log("mount: %s %s, cold and warm, run %d of %d" % (
                    label, name, rep + 1, s["mount_cold_runs"]))
                k = rep % len(places)
                for place in places[k:] + places[:k]:
                    place.prepare()
                    place.make_cold(engine)
                    place.reset_counters()
                    per[place.name]["cold"].append(_sample(engine, place, sql, want))
                    if place.server:
                        per[place.name]["gets"].append(place.gets())
                    for _ in range(s["mount_warm_runs"]):
                        per[place.name]["warm"].append(_sample(engine, place, sql, want))
            for place in places:
                for kind in ("cold", "warm"):
                    for smp in per[place.name][kind]:
                        smp.pop("rows", None)
    return out, asked


def _get_throughput(ctx, daemon, server, log):
    """`cairn get` of a large document from the s3 backend, read once before,
    against `cat` of the same bytes on local disk, also read once before."""
    size, runs = ctx.sizes["mount_get_size"], ctx.sizes["mount_get_runs"]
    src = os.path.join(ctx.mkdtemp("big"), "big.bin")
    with open(src, "wb") as f:
        for _ in range(size // MIB):
            f.write(os.urandom(MIB))
    server.profile("clean")
    log("mount: cairn add of %s to the s3 backend" % report.fmt_bytes(size))
    t0 = time.monotonic()
    _add(daemon, "big.bin", src, "large document")
    add_s = time.monotonic() - t0
    server.profile(GET_PROFILE)
    out = {"size": size, "add_s": add_s, "cairn get": [], "cat": [], "gets": []}
    with open(os.devnull, "wb") as null:
        procs.check_ok(run_timed(daemon.cli("get", "big.bin"), stdout=null,
                                 timeout=QUERY_TIMEOUT), "cairn get")  # warms the cache
        run_timed(["cat", src], stdout=null)
        for i in range(runs):
            log("mount: cairn get and cat of %s, run %d of %d" % (
                report.fmt_bytes(size), i + 1, runs))
            for tool in (("cairn get", "cat") if i % 2 == 0 else ("cat", "cairn get")):
                if tool == "cat":
                    r = procs.check_ok(run_timed(["cat", src], stdout=null), "cat")
                else:
                    server.reset_counters()
                    r = procs.check_ok(run_timed(daemon.cli("get", "big.bin"), stdout=null,
                                                 timeout=QUERY_TIMEOUT), "cairn get")
                    out["gets"].append(server.gets())
                out[tool].append(r.seconds)
    os.unlink(src)
    return out


def _versions(engines):
    v = {}
    for engine, _ in engines:
        if engine == "sqlite":
            import sqlite3
            v[engine] = "SQLite %s (Python's sqlite3)" % sqlite3.sqlite_version
        else:
            pj = os.path.join(_db().DUCKDB_MODULE, "package.json")
            with open(pj) as f:
                v[engine] = "@duckdb/node-api %s" % json.load(f)["version"]
    return v


def _remote_places(ctx, mod, files, names):
    """The fixture, cairnd and mount of the remote backend of fixture module
    `mod` holding the databases, and its places (one per mount profile)."""
    kind = mod.BACKENDS[0]
    server = mod.Fixture(ctx)
    # stall_timeout 2 s: an idle cairnd on a remote backend exits only once the
    # backend's no-progress watchdog (every stall_timeout / 4, 7.5 s by default)
    # has ticked after the last request, and every cold run stops one.
    url, env = server.backend(kind, "mount/store", stall_timeout=2)
    server.profile("clean")
    daemon = procs.Cairnd(ctx, "mount-" + kind, config="[backend]\nurl = %s\n" % url, env=env)
    for e, p in files.items():
        _add(daemon, names[e], p, "%s backend" % kind)
    mnt = os.path.join(daemon.dir, "mnt")
    mount = Mount(daemon, mnt).start()
    places = [Place("mount, %s %s" % (kind, profile), {
        e: os.path.join(mnt, names[e]) for e in files}, daemon, mount, server, profile)
        for profile in ctx.sizes["mount_profiles"]]
    return (server, daemon, mount), places


def run(ctx, result, log):
    why = fuse_missing(ctx)
    if why:
        raise procs.Skip("cairn mount cannot run here: " + why)
    s = ctx.sizes
    duck_why = _db().duckdb_missing()
    engines = [e for e in ENGINES if e[0] != "duckdb" or not duck_why]
    remote_why = {mod.BACKENDS[0]: mod.unavailable() for mod in REMOTES}
    data = result.data
    data.update(engines=[e for e, _ in engines], versions=_versions(engines),
                duckdb_why=duck_why, remote_why=remote_why, tier={
                    k: v for k, v in s.items() if k.startswith("mount_")})
    files = _make_databases(ctx, s, engines, log)
    data["db_bytes"] = {e: os.path.getsize(p) for e, p in files.items()}
    names = {e: "db/orders." + e for e in files}

    places = [Place(LOCAL, files)]
    daemon = procs.Cairnd(ctx, "mount-local")
    for e, p in files.items():
        _add(daemon, names[e], p, "local backend")
    mnt = os.path.join(daemon.dir, "mnt")
    mount = Mount(daemon, mnt).start()
    places.append(Place(MOUNT_LOCAL, {e: os.path.join(mnt, names[e]) for e in files},
                        daemon, mount))
    remotes = {}  # kind: (fixture, cairnd, mount)
    for mod in REMOTES:
        kind = mod.BACKENDS[0]
        if remote_why[kind]:
            continue
        try:
            remotes[kind], more = _remote_places(ctx, mod, files, names)
        except procs.Skip as e:
            remote_why[kind] = str(e)
            continue
        places += more
    data["samples"], asked = _queries(ctx, places, engines, log)
    data["local_resident_after_drop"] = places[0].resident
    for place in places[1:]:
        place.daemon.check_alive()
    get = _get_throughput(ctx, remotes["s3"][1], remotes["s3"][0], log) if "s3" in remotes else None
    data["get"] = get
    mount.stop()
    daemon.stop()
    for server, remote_daemon, remote_mount in remotes.values():
        remote_mount.stop()
        remote_daemon.stop()
        server.stop()
    _report(ctx, result, places, engines, asked, files, get)
    if duck_why:
        result.note("DuckDB: not measured: " + duck_why)
    for kind, why in remote_why.items():
        if why:
            result.note("%s backend: not measured: %s" % (kind, why))
    left = [b for b in places[0].resident if b]
    if left:
        result.note("the local file was not wholly dropped from the page cache before some "
                    "cold runs (%s still resident at most)" % report.fmt_bytes(max(left)))


def _count(x):
    """A median of counts: a whole number unless it falls between two."""
    return int(x) if x == int(x) else "%.1f" % x


def _medians(per, kind):
    return report.median([x["ms"] for x in per[kind]]) if per[kind] else None


def _report(ctx, result, places, engines, asked, files, get):
    data = result.data
    s = ctx.sizes
    totals = {}
    for engine, label in engines:
        qs = asked[engine]
        samples = data["samples"][engine]
        t = result.table(
            "%s: %s queries on a %s database (%s), median ms" % (
                label, len(qs), report.fmt_bytes(os.path.getsize(files[engine])),
                data["versions"][engine]),
            ["query", "where", "cold ms", "warm ms", "cold ÷ local file", "warm ÷ local file",
             "backend GETs (cold)"],
            "Each query in a process of its own, opening the database read-only, timed inside "
            "it: open, query and every row read (not the start of node or Python). Cold: the "
            "local file evicted from the page cache (posix_fadvise DONTNEED); a mount "
            "unmounted, its cairnd stopped, its data directory evicted, cairnd started and "
            "mounted again. Warm: the same query run again right after. %d cold and %d warm "
            "runs per place and query; the places take turns. *backend GETs*: the GETs the "
            "proxy in front of the S3 test server or of Azurite counted during a cold run "
            "(remote places only). *all* is the sum of the queries' medians, which the "
            "targets judge." % (
                s["mount_cold_runs"], s["mount_cold_runs"] * s["mount_warm_runs"]))
        tot = totals[engine] = {p.name: {"cold": 0.0, "warm": 0.0} for p in places}
        for name, sql in qs + [("all", None)]:
            for place in places:
                if name == "all":
                    cold, warm = tot[place.name]["cold"], tot[place.name]["warm"]
                    gets = "-"
                else:
                    per = samples[name][place.name]
                    cold, warm = _medians(per, "cold"), _medians(per, "warm")
                    tot[place.name]["cold"] += cold
                    tot[place.name]["warm"] += warm
                    gets = _count(report.median(per["gets"])) if per["gets"] else "-"
                base = tot[LOCAL] if name == "all" else {
                    k: _medians(samples[name][LOCAL], k) for k in ("cold", "warm")}
                t.add(name, place.name, cold, warm,
                      report.fmt_ratio(report.ratio(cold, base["cold"])),
                      report.fmt_ratio(report.ratio(warm, base["warm"])), gets)
        result.note("%s queries: %s" % (label, "; ".join("%s: `%s`" % q for q in qs)))

    for engine, label in ENGINES:
        tot = totals.get(engine)
        name = ("mount: %s warm through cairn mount ≤ %.1fx the local file (all queries, every "
                "backend and profile)" % (label, WARM_RATIO))
        if tot is None:
            result.target(name, "not measured: " + (data["duckdb_why"] or "?"), None)
        else:
            ratios = [(p.name, report.ratio(tot[p.name]["warm"], tot[LOCAL]["warm"]))
                      for p in places[1:]]
            worst = max(r for _, r in ratios)
            result.target(name, "worst %s (%s)" % (report.fmt_ratio(worst), ", ".join(
                "%s %s" % (n, report.fmt_ratio(r)) for n, r in ratios)), worst <= WARM_RATIO)
        for mod in REMOTES:
            _cold_target(result, data, tot, label, engine, mod.BACKENDS[0])

    size = s["mount_get_size"]
    name = ("mount: `cairn get` of a %s document from the s3 backend (%s), cache warm, "
            "≥ %.0f GB/s" % (report.fmt_bytes(size), GET_PROFILE, GET_TARGET_GBS))
    if not get:
        result.target(name, "not measured: " + (data["remote_why"]["s3"] or "?"), None)
        return
    gbs = {tool: size / report.median(get[tool]) / 1e9 for tool in ("cairn get", "cat")}
    t = result.table(
        "`cairn get` of a %s document from the s3 backend (%s) vs `cat` of the local file"
        % (report.fmt_bytes(size), GET_PROFILE),
        ["tool", "runs", "median s", "GB/s (median)", "S3 GETs per run"],
        "Random bytes (incompressible). Both read once, untimed, before the timed runs (a warm "
        "cache), then alternately; whole commands, output to /dev/null. The S3 GETs are the "
        "proxy's count during each timed `cairn get` (0: served without the bucket). The "
        "document was added in %.1f s (profile clean)." % get["add_s"])
    t.add("cairn get (s3, %s)" % GET_PROFILE, len(get["cairn get"]),
          report.median(get["cairn get"]), report.fmt(gbs["cairn get"], 3),
          _count(report.median(get["gets"])))
    t.add("cat (local file)", len(get["cat"]), report.median(get["cat"]),
          report.fmt(gbs["cat"], 3), "-")
    result.target(name, "%s GB/s (cat of the local file: %s GB/s)" % (
        report.fmt(gbs["cairn get"], 3), report.fmt(gbs["cat"])), gbs["cairn get"] >= GET_TARGET_GBS)


def _cold_target(result, data, tot, label, engine, kind):
    """The target on cold queries through the mount on backend `kind` at
    COLD_PROFILE; `tot` the engine's sums per place (None: not measured)."""
    name = ("mount: %s cold through cairn mount, %s at %s, ≤ %.0fx the local file cold "
            "(all queries)" % (label, kind, COLD_PROFILE, COLD_RATIO))
    place = "mount, %s %s" % (kind, COLD_PROFILE)
    if tot is None:
        result.target(name, "not measured: " + (data["duckdb_why"] or "?"), None)
    elif place not in tot:
        result.target(name, "not measured: " + (data["remote_why"][kind] or
                                                "%s not run in this tier" % COLD_PROFILE), None)
    else:
        r = report.ratio(tot[place]["cold"], tot[LOCAL]["cold"])
        result.target(name, "%s (%s vs %s ms; %s database)" % (
            report.fmt_ratio(r), report.fmt(tot[place]["cold"]),
            report.fmt(tot[LOCAL]["cold"]), report.fmt_bytes(data["db_bytes"][engine])),
            r <= COLD_RATIO)
