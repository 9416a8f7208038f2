# shellcheck shell=bash
# Shared helpers for scripts/check and scripts/quickstart. Source it; it
# defines functions only and changes no shell options.

# Debian packages needed to build and test cairn.
CAIRN_DEB_PACKAGES=(
    build-essential meson ninja-build pkg-config
    libuv1-dev libmsgpack-dev libsqlite3-dev libzstd-dev libssl-dev
    libinih-dev libjansson-dev libcmocka-dev python3
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
    local missing=() pkg
    for pkg in "${CAIRN_DEB_PACKAGES[@]}"; do
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
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
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
