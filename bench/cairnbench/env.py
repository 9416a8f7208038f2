"""The run's context: tier sizes, where the binaries are, which peers exist,
installing missing Debian packages, and a description of the machine."""

import os
import platform
import shutil
import subprocess
import tempfile

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Sizes of each tier. smoke: every suite at toy sizes, for ./scripts/check (a
# minute at most); quick: a few minutes; full: under an hour.
TIERS = {
    "smoke": {
        "crud_files": 10, "crud_ops": 5, "crud_gets": 5,
        "mc_clients": [1, 4], "mc_ops": 400, "mc_seconds": 1.0, "mc_files": 20,
        "mc_mcp_clients": [4],
        "mc_add_clients": [1, 4], "mc_add_pipeline": (4, 8),
        "redis_get_requests": 2000, "redis_set_per_client": 50,
        "be_sizes": [(1 * KIB, 3), (64 * KIB, 3)], "be_list_iterations": 2,
        "be_peer_iterations": 2,
        "sftp_size": 1 * MIB, "sftp_iterations": 3, "sftp_rounds": 1,
        "sftp_large": 8 * MIB, "sftp_large_runs": 1,
        "s3_profiles": ["clean"], "s3_iterations": 2, "s3_rounds": 1,
        "s3_mc_clients": [4], "s3_mc_fault_clients": [4], "s3_mc_seconds": 1.0,
        "man_pages": 150, "search_runs": 1, "search_queries": 5, "quality_queries": 6,
        "ingest_big": 2 * MIB,
        "mount_rows": {"sqlite": 20000, "duckdb": 20000},
        "mount_queries": ["point"], "mount_profiles": ["rtt20"],
        "mount_cold_runs": 1, "mount_warm_runs": 1,
        "mount_get_size": 8 * MIB, "mount_get_runs": 1,
        "sh_profiles": ["clean"], "sh_loads": [(2, 1)], "sh_seconds": 1.0,
        "sh_lag_samples": 3, "sh_idle_seconds": 5.0, "sh_catch_up_s": 10.0,
        "sh_idle_default": 0,
    },
    "quick": {
        "crud_files": 60, "crud_ops": 20,
        # a get and a cat take a millisecond or so and move by a tenth between runs: many samples
        "crud_gets": 300,
        "mc_clients": [1, 4, 8, 16, 64], "mc_ops": 30000, "mc_seconds": 3.0, "mc_files": 500,
        "mc_mcp_clients": [1, 4, 8],
        # durable adds by client count, and (clients, requests in flight each) against redis -P
        "mc_add_clients": [1, 8, 64, 256], "mc_add_pipeline": (8, 8),
        "redis_get_requests": 50000, "redis_set_per_client": 400,
        "be_sizes": [(1 * KIB, 30), (64 * KIB, 30), (1 * MIB, 10), (64 * MIB, 3)],
        "be_list_iterations": 10, "be_peer_iterations": 5,
        "sftp_size": 1 * MIB, "sftp_iterations": 6, "sftp_rounds": 5,
        "sftp_large": 256 * MIB, "sftp_large_runs": 3,
        "s3_profiles": ["clean", "rtt20", "rtt50", "rtt100"], "s3_iterations": 4,
        "s3_rounds": 2, "s3_clean_rounds": 6,
        "s3_mc_clients": [8], "s3_mc_fault_clients": [4, 8], "s3_mc_seconds": 5.0,
        "man_pages": 3000, "search_runs": 3, "search_queries": 20, "quality_queries": None,
        "ingest_big": 64 * MIB,
        # about 100 MiB each
        "mount_rows": {"sqlite": 1750000, "duckdb": 2500000},
        # "aggregate" scans the table as "join" does: left to the full tier
        "mount_queries": ["join", "point", "index"],
        "mount_profiles": ["rtt20", "rtt50"], "mount_cold_runs": 2, "mount_warm_runs": 2,
        "mount_get_size": 256 * MIB, "mount_get_runs": 3,
        "sh_profiles": ["rtt20", "rtt50"], "sh_loads": [(8, 1), (8, 8)], "sh_seconds": 5.0,
        "sh_lag_samples": 20, "sh_idle_seconds": 20.0, "sh_catch_up_s": 20.0,
        "sh_idle_default": 30.0,
    },
    "full": {
        "crud_files": 60, "crud_ops": 20,
        # a get and a cat take a millisecond or so and move by a tenth between runs: many samples
        "crud_gets": 300,
        "mc_clients": [1, 4, 8, 16, 64], "mc_ops": 400000, "mc_seconds": 15.0, "mc_files": 2000,
        "mc_mcp_clients": [1, 4, 8],
        # durable adds by client count, and (clients, requests in flight each) against redis -P
        "mc_add_clients": [1, 8, 64, 256], "mc_add_pipeline": (8, 8),
        "redis_get_requests": 300000, "redis_set_per_client": 2000,
        "be_sizes": [(1 * KIB, 200), (64 * KIB, 200), (1 * MIB, 50), (64 * MIB, 5)],
        "be_list_iterations": 50, "be_peer_iterations": 20,
        "sftp_size": 1 * MIB, "sftp_iterations": 10, "sftp_rounds": 10,
        "sftp_large": 1 * GIB, "sftp_large_runs": 5,
        "s3_profiles": ["clean", "rtt20", "rtt50", "rtt100"], "s3_iterations": 6,
        "s3_rounds": 4, "s3_clean_rounds": 8,
        "s3_mc_clients": [8], "s3_mc_fault_clients": [4, 8], "s3_mc_seconds": 15.0,
        "man_pages": None, "search_runs": 5, "search_queries": 20, "quality_queries": None,
        "ingest_big": 1 * GIB,
        "mount_rows": {"sqlite": 1750000, "duckdb": 2500000},
        "mount_queries": ["aggregate", "join", "point", "index"],
        "mount_profiles": ["rtt20", "rtt50"], "mount_cold_runs": 5, "mount_warm_runs": 3,
        "mount_get_size": 1 * GIB, "mount_get_runs": 3,
        "sh_profiles": ["rtt20", "rtt50"], "sh_loads": [(8, 1), (8, 8)], "sh_seconds": 15.0,
        "sh_lag_samples": 40, "sh_idle_seconds": 60.0, "sh_catch_up_s": 120.0,
        "sh_idle_default": 120.0,
    },
}

# Command -> Debian package, for the peers and for the charts.
PEER_PACKAGES = {
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
    "git": "git",
    "gnuplot": "gnuplot-nox",
    "quest": "xapian-tools",
    "omindex": "xapian-omega",
    "restic": "restic",
    "rg": "ripgrep",
    "hyperfine": "hyperfine",
    "rclone": "rclone",
    "zstd": "zstd",
    "/usr/bin/time": "time",  # GNU time, for the peak RSS of commands
    # OpenSSH's clients, the sftp backend's peers. Not openssh-server: its package
    # starts and enables a system sshd; the suite skips its sftp rows without one.
    "sftp": "openssh-client",
    "scp": "openssh-client",
}


class Context:
    """What every suite needs: the tier, binaries, scratch space and notes."""

    def __init__(self, tier, build_dir, out_dir, keep_tmp=False):
        self.tier = tier
        self.sizes = TIERS[tier]
        self.build_dir = os.path.abspath(build_dir)
        self.out_dir = os.path.abspath(out_dir)
        self.bin = {
            "cairnd": os.path.join(self.build_dir, "daemon", "cairnd"),
            "cairn": os.path.join(self.build_dir, "client", "cairn"),
            "loadgen": os.path.join(self.build_dir, "bench", "cairn-loadgen"),
            "backend-bench": os.path.join(self.build_dir, "bench", "backend-bench"),
            "s3-raw": os.path.join(self.build_dir, "bench", "s3-raw"),
            "az-raw": os.path.join(self.build_dir, "bench", "az-raw"),
        }
        # Short: Unix socket paths must fit in 108 bytes.
        self.tmp = tempfile.mkdtemp(prefix="cb-", dir=os.environ.get("CAIRN_BENCH_TMP", "/tmp"))
        self.keep_tmp = keep_tmp
        self.shared = {}  # data prepared by one suite and reused by another (the corpus)

    def missing_binaries(self):
        return [p for p in self.bin.values() if not os.access(p, os.X_OK)]

    def mkdtemp(self, label):
        return tempfile.mkdtemp(prefix=label + "-", dir=self.tmp)

    def have(self, tool):
        return shutil.which(tool) is not None

    def cleanup(self):
        if not self.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def install_missing(log):
    """Installs the peers' Debian packages that are missing, when root.

    Returns the list of packages still missing afterwards. apt-get update runs
    once, and only when something is to be installed.
    """
    missing = sorted({pkg for cmd, pkg in PEER_PACKAGES.items() if shutil.which(cmd) is None})
    if not missing:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        log("not root (or no apt-get): cannot install " + " ".join(missing))
        return missing
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("installing " + " ".join(missing))
    subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    # Only names this machine's apt knows; the rest are reported as missing.
    available = [pkg for pkg in missing
                 if subprocess.run(["apt-cache", "show", pkg], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL).returncode == 0]
    if available:
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + available,
                       env=env, stdout=subprocess.DEVNULL)
    return sorted({pkg for cmd, pkg in PEER_PACKAGES.items() if shutil.which(cmd) is None})


def _first_line(argv):
    try:
        out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[0].strip() if lines else None


def machine_info(path):
    """nproc, memory, CPU model, kernel, and the disk and file system of `path`."""
    info = {"nproc": os.cpu_count(), "kernel": platform.release()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    free = subprocess.run(["free", "-h"], stdout=subprocess.PIPE, text=True).stdout
    for line in free.splitlines():
        if line.startswith("Mem:"):
            fields = line.split()
            info["memory"] = "%s total, %s available" % (fields[1], fields[-1])
    df = subprocess.run(["df", "--output=source,fstype,size", path],
                        stdout=subprocess.PIPE, text=True).stdout.splitlines()
    if len(df) >= 2:
        source, fstype, size = df[1].split()[:3]
        info["filesystem"] = "%s on %s (%s 1K-blocks)" % (fstype, source, size)
        dev = os.path.basename(source)
        base = dev.rstrip("0123456789") if not dev.startswith("nvme") else dev.split("p")[0]
        rota = "/sys/block/%s/queue/rotational" % base
        if os.path.exists(rota):
            with open(rota) as f:
                info["disk"] = "rotational" if f.read().strip() == "1" else "non-rotational"
    info["free_h"] = free.rstrip()
    return info


def tool_versions():
    versions = {}
    for name, argv in [
        ("git", ["git", "--version"]),
        ("redis-server", ["redis-server", "--version"]),
        ("restic", ["restic", "version"]),
        ("omindex", ["omindex", "--version"]),
        ("quest", ["quest", "--version"]),
        ("rg", ["rg", "--version"]),
        ("rclone", ["rclone", "version"]),
        ("zstd", ["zstd", "--version"]),
        ("tar", ["tar", "--version"]),
        ("gnuplot", ["gnuplot", "--version"]),
        ("openssh", ["ssh", "-V"]),
    ]:
        if shutil.which(argv[0]):
            versions[name] = _first_line(argv)
    return versions


def source_version(repo):
    """The commit cairn was built from, and whether the tree had changes."""
    head = _first_line(["git", "-C", repo, "rev-parse", "--short", "HEAD"])
    if not head or not shutil.which("git"):
        return "unknown"
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return "commit %s%s" % (head, " with uncommitted changes" if dirty.strip() else "")
