"""The sftp rows of the backends suite: cairn's sftp backend against OpenSSH's
own clients, all talking to one sshd on 127.0.0.1 (cairnbench/sshd.py).

Per operation (1 MiB objects; a ranged read of 64 KiB; exists; a list of 50;
delete): bench/backend-bench --url sftp://... drives the backend, one
operation at a time over its open connection (opening it is not timed), and
OpenSSH's `sftp -b BATCH` does the same operations, one batch per kind of
operation, each batch over one connection:

    write          put -f SRC DIR/tmp/oN + rename DIR/tmp/oN DIR/obj/oN
                   (-f: fsync@openssh.com before close; then the rename into
                   place: the temporary-then-rename shape of a backend put)
    read           get DIR/obj/oN /dev/null
    ranged read    reget DIR/obj/oN PART (PART: a local file as long as the
                   object less 64 KiB, so sftp fetches just the last 64 KiB;
                   sftp has no other ranged read. The backend reads the same
                   last 64 KiB.)
    exists         ls -l DIR/obj/oN
    list 50        ls -l DIR/la (50 files of 1 KiB)
    delete         rm DIR/obj/oN

sftp echoes each batch command ("sftp> put ...") just before running it and
flushes its output line by line, so the time between two echoes, read from
its stdout pipe, is what one command took (a final `lpwd`, which needs no
round trip, marks the end of the last one): per-operation samples. As a
cross-check, each batch's whole wall time less that of a batch of no
operations (connecting, authenticating, starting the sftp subsystem) over the
number of operations gives the mean cost per operation a second way.

Large files: `cairn add FILE` (the CLI, through a cairnd whose backend is the
sftp URL: chunking, hashing, compression attempts and packs included, the path
users take) against `scp` of the same file to the same server, and `rclone
copyto` to an sftp remote configured through environment variables.
"""

import os
import subprocess
import time

from . import procs
from .procs import run_timed

KIB = 1024
MIB = 1024 * KIB

OPS = ["put", "get", "range", "head", "list_50", "delete"]
RANGE = 64 * KIB
LIST_N = 50
LIST_OBJECT_SIZE = 1 * KIB


class PeerError(RuntimeError):
    """A peer (sftp, scp, rclone) failed: its comparison is not measured."""


def _batch(sshd, path, cmds, timeout):
    """Runs `sftp -b path` with `cmds` (and a final `lpwd`); returns the whole
    wall time in ms and each command's time in ms (between its echo and the next)."""
    with open(path, "w") as f:
        f.write("".join(c + "\n" for c in cmds + ["lpwd"]))
    argv = ["sftp", "-q", "-b", path] + sshd.ssh_options() + [sshd.destination()]
    echoes = []
    err = open(path + ".err", "w+b")
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                         bufsize=0)
    deadline = time.monotonic() + timeout
    try:
        for line in p.stdout:
            if line.startswith(b"sftp> "):
                echoes.append(time.perf_counter())
            if time.monotonic() > deadline:
                raise PeerError("sftp batch did not finish within %d s" % timeout)
        p.wait(timeout=max(1, deadline - time.monotonic()))
    except (PeerError, subprocess.TimeoutExpired):
        p.kill()
        p.wait()
        raise PeerError("sftp batch did not finish within %d s" % timeout)
    finally:
        p.stdout.close()
    total = (time.perf_counter() - t0) * 1000.0
    err.seek(0)
    stderr = err.read().decode(errors="replace").strip()
    err.close()
    if p.returncode != 0:
        raise PeerError("sftp -b failed (exit %s): %s" % (p.returncode, stderr[-300:]))
    if len(echoes) != len(cmds) + 1:
        raise PeerError("sftp echoed %d commands of %d" % (len(echoes), len(cmds) + 1))
    per_cmd = [(echoes[i + 1] - echoes[i]) * 1000.0 for i in range(len(cmds))]
    return total, per_cmd


def peer_round(ctx, sshd, remote, src, size, n, list_iterations, timeout=600):
    """One round of OpenSSH sftp batches in the directory `remote` (on this
    machine: the server is on loopback, so it is prepared with plain file
    calls). Returns {op: [ms per op]}, {op: whole batch ms}, {op: ops in the
    batch} and the ms of a batch of nothing (median of two before, one after)."""
    for sub in ("tmp", "obj", "la"):
        os.makedirs(os.path.join(remote, sub), exist_ok=True)
    blob = os.urandom(LIST_OBJECT_SIZE)
    for i in range(LIST_N):
        with open(os.path.join(remote, "la", "o%06d" % i), "wb") as f:
            f.write(blob)
    local = ctx.mkdtemp("sftp-peer")
    parts = []
    for i in range(n):
        part = os.path.join(local, "p%06d" % i)
        with open(part, "wb") as f:
            f.truncate(size - RANGE)  # sparse: reget only looks at its length
        parts.append(part)
    batch = os.path.join(local, "batch")

    def obj(i):
        return "%s/obj/o%06d" % (remote, i)

    plans = {
        "put": [c for i in range(n) for c in (
            "put -f %s %s/tmp/o%06d" % (src, remote, i),
            "rename %s/tmp/o%06d %s" % (remote, i, obj(i)))],
        "get": ["get %s /dev/null" % obj(i) for i in range(n)],
        "range": ["reget %s %s" % (obj(i), parts[i]) for i in range(n)],
        "head": ["ls -l %s" % obj(i) for i in range(n)],
        "list_50": ["ls -l %s/la" % remote for _ in range(list_iterations)],
        "delete": ["rm %s" % obj(i) for i in range(n)],
    }
    samples, totals, counts = {}, {}, {}
    empty = [_batch(sshd, batch, [], timeout)[0] for _ in range(2)]
    for op in OPS:
        total, per_cmd = _batch(sshd, batch, plans[op], timeout)
        if op == "put":
            per_cmd = [per_cmd[k] + per_cmd[k + 1] for k in range(0, len(per_cmd), 2)]
            if os.path.getsize(obj(0)) != size:
                raise PeerError("sftp put wrote %d bytes, not %d" % (os.path.getsize(obj(0)), size))
        if op == "range":
            with open(src, "rb") as a, open(parts[0], "rb") as b:
                a.seek(size - RANGE)
                b.seek(size - RANGE)
                if a.read() != b.read() or os.path.getsize(parts[0]) != size:
                    raise PeerError("sftp reget did not fetch the object's last 64 KiB")
        samples[op], totals[op], counts[op] = per_cmd, total, len(per_cmd)
    empty.append(_batch(sshd, batch, [], timeout)[0])
    if os.listdir(os.path.join(remote, "obj")):
        raise PeerError("sftp rm left objects behind")
    procs.remove_tree(local)
    procs.remove_tree(remote)
    return samples, totals, counts, sorted(empty)[1]


class NoBackend(Exception):
    """This build has no sftp backend (backend_new does not know the scheme)."""


def backend_round(ctx, sshd, remote, size, n, list_iterations, timeout=1800):
    """One backend-bench process against the sftp URL; {op: [ms]} and its peak RSS.
    list_50 runs `n` times there; only the first `list_iterations` are kept, so
    both sides have as many list samples."""
    os.makedirs(remote, exist_ok=True)
    # One session, as the sftp client has: the backend's other sessions would open on
    # their first request, and that is not the cost of an operation.
    url = sshd.srv.url(remote, connections=1)
    argv = [ctx.bin["backend-bench"], "--url", url, "--size", str(size), "--iterations", str(n),
            "--range", str(RANGE), "--list=50"]
    r = run_timed(argv, capture=True, timeout=timeout)
    if r.returncode != 0:
        if "unknown backend" in r.stderr:
            raise NoBackend(r.stderr.strip().splitlines()[-1])
        raise procs.SuiteError("backend-bench --url sftp://... failed (%s): %s"
                               % (r.returncode, r.stderr.strip()[-400:]))
    import json
    data = json.loads(r.stdout)
    ops = data["modes"]["backend"]
    procs.remove_tree(remote)
    return {op: ops[op][:list_iterations] if op == "list_50" else ops[op] for op in OPS}, \
        data["peak_rss_kib"]


# --- large files -------------------------------------------------------------

RCLONE_REMOTE = "cbsftp"


def rclone_env(ctx, sshd):
    """An sftp remote named cbsftp, all from the environment (an empty config file,
    so the user's own rclone.conf does not apply)."""
    conf = os.path.join(ctx.tmp, "rclone-sftp.conf")
    open(conf, "w").close()
    s = sshd.srv
    pre = "RCLONE_CONFIG_%s_" % RCLONE_REMOTE.upper()
    env = dict(os.environ, RCLONE_CONFIG=conf)
    env.update({pre + "TYPE": "sftp", pre + "HOST": s.host, pre + "PORT": str(s.port),
                pre + "USER": s.user, pre + "KEY_FILE": s.user_key,
                pre + "KNOWN_HOSTS_FILE": s.known_hosts})
    return env


def scp_argv(sshd, src, dst):
    return ["scp", "-q"] + sshd.ssh_options() + [src, "%s:%s" % (sshd.destination(), dst)]


def large_files(ctx, sshd, daemon, size, runs, remote, have_rclone, env, log):
    """Each run: a new random file (cairn must not dedup it), stored by every
    tool, in an order that rotates from run to run, with a sync(2) before
    each. {tool: [seconds]}."""
    tools = (["cairn add"] if daemon else []) + ["scp"] + (["rclone copyto"] if have_rclone else [])
    out = {t: [] for t in tools}
    notes = []
    os.makedirs(os.path.join(remote, "scp"), exist_ok=True)
    os.makedirs(os.path.join(remote, "rclone"), exist_ok=True)
    srcdir = ctx.mkdtemp("sftp-large")
    for run in range(runs):
        src = os.path.join(srcdir, "large-%d" % run)
        with open(src, "wb") as f:
            left = size
            while left:
                n = min(left, 8 * MIB)
                f.write(os.urandom(n))
                left -= n
        # Nothing written before a tool's clock starts is left for it to flush: not the
        # file itself, and not what the tool before it wrote without an fsync (scp, rclone).
        os.sync()
        order = tools[run % len(tools):] + tools[:run % len(tools)]
        for tool in order:
            if tool == "cairn add":
                r = procs.check_ok(run_timed(daemon.cli("add", src), timeout=3600), "cairn add")
                daemon.check_alive()
            elif tool == "scp":
                dst = os.path.join(remote, "scp", "large-%d" % run)
                r = run_timed(scp_argv(sshd, src, dst), timeout=3600)
                if r.returncode != 0 or os.path.getsize(dst) != size:
                    raise PeerError("scp failed (exit %s): %s" % (r.returncode,
                                                                  r.stderr.strip()[-300:]))
                os.unlink(dst)
            else:
                dst = os.path.join(remote, "rclone", "large-%d" % run)
                r = run_timed(["rclone", "copyto", src, "%s:%s" % (RCLONE_REMOTE, dst)],
                              env=env, timeout=3600)
                if r.returncode != 0 or not os.path.exists(dst) or os.path.getsize(dst) != size:
                    notes.append("rclone copyto (sftp) failed, not compared: %s"
                                 % r.stderr.strip()[-300:])
                    tools.remove(tool)
                    out.pop(tool, None)
                    continue
                os.unlink(dst)
            out[tool].append(r.seconds)
            os.sync()
            log("backends sftp: %s of %d MiB: %.2f s" % (tool, size // MIB, r.seconds))
        os.unlink(src)
    procs.remove_tree(srcdir)
    return out, notes
