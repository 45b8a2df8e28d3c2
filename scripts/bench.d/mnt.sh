#!/usr/bin/env bash
# Mount helper for scripts/bench (usable from hyperfine --prepare, which runs in its own shell).
#   mnt.sh up   TABLE MNT            mount (tinydelta-mount returns once the mount is ready); the
#                                    daemon logs to MNT.log
#   mnt.sh down MNT [HWM_FILE]       append the daemon's VmHWM (kB) to HWM_FILE, then unmount and
#                                    wait for the daemon to exit
#   mnt.sh re   TABLE MNT [HWM_FILE] down (if mounted) + up: a fresh daemon with an empty page cache
#   mnt.sh pid  MNT                  the daemon's pid
# The daemon is found by its command line (MOUNT_BIN TABLE MNT ...), TABLE recorded at `up`.
set -euo pipefail
BIN=${MOUNT_BIN:?MOUNT_BIN must name the tinydelta-mount binary}

pid_of() { # MNT -> pid of the daemon serving it (empty if none)
    local mnt=$1 table
    [[ -f "$mnt.table" ]] || return 0
    table=$(cat "$mnt.table")
    # (the daemon re-executes itself with extra flags, e.g. --foreground --notify-ready)
    pgrep -n -f "^$BIN $table $mnt( |\$)" || true
}

up() {
    local table=$1 mnt=$2
    mkdir -p "$mnt"
    echo "$table" > "$mnt.table"
    # The daemon's log (appended across remounts) says whether it uses passthrough.
    "$BIN" "$table" "$mnt" --log-file "$mnt.log"
    mountpoint -q "$mnt" || { echo "mnt.sh: $BIN returned but $mnt is not a mount point" >&2; exit 1; }
}

down() {
    local mnt=$1 hwm=${2:-} pid i
    mountpoint -q "$mnt" || return 0
    pid=$(pid_of "$mnt")
    if [[ -n "$hwm" && -n "$pid" ]]; then
        awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" >> "$hwm" || true
    fi
    fusermount3 -u "$mnt"
    for i in $(seq 1 500); do   # wait (up to 10 s) for the daemon to exit
        [[ -n "$pid" && -d "/proc/$pid" ]] || break
        sleep 0.02
    done
}

cmd=$1; shift
case "$cmd" in
    up) up "$@" ;;
    down) down "$@" ;;
    re) down "$2" "${3:-}"; up "$1" "$2" ;;
    pid) pid_of "$1" ;;
    *) echo "mnt.sh: unknown command $cmd" >&2; exit 2 ;;
esac
