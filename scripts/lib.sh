# shellcheck shell=bash
# Shared helpers for scripts/check and scripts/quickstart. Source it; it
# defines functions only and changes no shell options.

# Debian packages needed to build and test cairn.
CAIRN_DEB_PACKAGES=(
    build-essential meson ninja-build pkg-config
    libuv1-dev libmsgpack-dev libsqlite3-dev libzstd-dev libssl-dev
    libinih-dev libjansson-dev libcmocka-dev python3 libssh2-1-dev
    libcurl4-openssl-dev
    # cairn mount (libfuse3), fusermount3 for tests/integration/test_mount.py, and
    # tests/powercut, the FUSE file system that cuts the power
    libfuse3-dev fuse3
    openssh-server openssh-client scdoc
    # strace shows tests/integration/test_lifecycle.py which syncs cairnd makes at start,
    # and libfaketime sets its clock a day ahead
    strace faketime
    libsystemd-dev
    # scripts/check-format (the test `format`) checks every C file against .clang-format
    clang-format
    # openssl s_server: a TLS endpoint with a self-signed certificate, which cairnd must refuse
    # (tests/integration/test_security_sound.py)
    openssl
    # systemd-socket-activate and systemd-analyze for tests/integration/test_systemd.py
    # (which skips what is missing); installing it does not make systemd PID 1.
    systemd
)

# Peers of the benchmarks (bench/run), whose smoke tier runs with the tests.
# GNU time measures the peak RSS of commands.
CAIRN_BENCH_DEB_PACKAGES=(
    redis-server redis-tools git gnuplot-nox xapian-tools xapian-omega
    restic ripgrep rclone zstd time
)

cairn_log() {
    printf '==> %s\n' "$*"
}

# Installs whichever of CAIRN_DEB_PACKAGES are missing, with apt-get as root
# or through passwordless sudo. Runs `apt-get update` only when something is
# missing. Without dpkg (not Debian) it only warns.
cairn_install_deps() {
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "warning: dpkg-query not found; install these yourself: ${CAIRN_DEB_PACKAGES[*]}" >&2
        return 0
    fi
    local missing=() pkg wanted=("${CAIRN_DEB_PACKAGES[@]}")
    # The MCP tests drive cairn mcp with the official SDK client (tests/mcp),
    # on node and npm: Debian's packages, unless some node with npm is there
    # already (NodeSource's nodejs ships npm and conflicts with Debian's).
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        wanted+=(nodejs npm)
    fi
    for pkg in "${wanted[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "error: missing packages: ${missing[*]}" >&2
            echo "       run as root or: sudo apt-get install ${missing[*]}" >&2
            return 1
        fi
    fi
    cairn_log "installing ${missing[*]}"
    # Without our TMPDIR: apt's unprivileged helper cannot write to a 0700 one,
    # and then fails to check the archive signatures.
    "${sudo[@]}" env -u TMPDIR DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env -u TMPDIR DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# cairn_meson_setup BUILDDIR ARGS...: configures BUILDDIR with ARGS, fresh
# or over an existing configuration (wiped if reconfiguring fails).
cairn_meson_setup() {
    local dir=$1
    shift
    if [ -e "$dir/meson-private/coredata.dat" ]; then
        meson setup --reconfigure "$@" "$dir" && return 0
        cairn_log "reconfiguring $dir failed; wiping it"
        meson setup --wipe "$@" "$dir" && return 0
        rm -rf "$dir"
    elif [ -e "$dir" ]; then
        rm -rf "$dir"
    fi
    meson setup "$@" "$dir"
}

# The last commit of storage format 1 (one file per chunk, reference counts in
# cairn.db). tests/integration/test_upgrade.py makes a data directory with its
# cairnd and cairn and upgrades it with the current build.
CAIRN_FORMAT1_COMMIT=0aab0082934277738c68f64a16f32ee2e98965b3

# cairn_build_format1 DIR: from the top of the source tree, builds cairnd and
# cairn (those two only, without tests) of CAIRN_FORMAT1_COMMIT from
# `git archive` in DIR/<commit>/ (src/ and build/), and exports their paths
# as CAIRND_V1 and CAIRN_V1. A finished build is marked with DIR/<commit>/done
# and reused by later runs. When the checkout cannot provide the commit (not a
# git checkout, a shallow clone), it says so and exports CAIRN_V1_UNAVAILABLE
# with the reason instead, which the upgrade test reports as its reason for
# skipping. Returns non-zero when the build itself failed (and says so in
# CAIRN_V1_UNAVAILABLE too).
cairn_build_format1() {
    local short=${CAIRN_FORMAT1_COMMIT:0:7} dir
    unset CAIRND_V1 CAIRN_V1 CAIRN_V1_UNAVAILABLE
    mkdir -p "$1"
    dir="$(cd "$1" && pwd)/$CAIRN_FORMAT1_COMMIT"
    if [ -e "$dir/done" ] && [ -x "$dir/build/daemon/cairnd" ] && [ -x "$dir/build/client/cairn" ]; then
        cairn_log "format 1 ($short): reusing the build in $dir"
    else
        local reason=""
        if ! command -v git >/dev/null 2>&1; then
            reason="git is not installed"
        elif [ "$(git rev-parse --show-toplevel 2>/dev/null)" != "$(pwd -P)" ]; then
            reason="$(pwd) is not a git checkout (a tarball?)"
        elif ! git cat-file -e "$CAIRN_FORMAT1_COMMIT^{commit}" 2>/dev/null; then
            reason="commit $short is not in this clone (a shallow clone? git fetch --unshallow)"
        fi
        if [ -n "$reason" ]; then
            cairn_log "cannot build format 1 ($short): $reason; the upgrade test will be skipped"
            export CAIRN_V1_UNAVAILABLE="no format 1 build: $reason"
            return 0
        fi
        cairn_log "build format 1 ($short) in $dir"
        rm -rf "$dir"
        mkdir -p "$dir/src"
        if ! git archive -o "$dir/src.tar" "$CAIRN_FORMAT1_COMMIT" ||
            ! tar -x -f "$dir/src.tar" -C "$dir/src" ||
            ! meson setup "$dir/build" "$dir/src" -Dbuildtype=debugoptimized -Dtests=false \
                >"$dir/setup.log" 2>&1 ||
            ! ninja -C "$dir/build" daemon/cairnd client/cairn; then
            if [ -s "$dir/setup.log" ]; then
                tail -n 20 "$dir/setup.log" >&2
            fi
            export CAIRN_V1_UNAVAILABLE="the format 1 build ($short) failed"
            return 1
        fi
        rm -f "$dir/src.tar"
        touch "$dir/done"
    fi
    export CAIRND_V1="$dir/build/daemon/cairnd" CAIRN_V1="$dir/build/client/cairn"
}
