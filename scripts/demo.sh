#!/usr/bin/env bash
# The main job end to end on the bundled example data (examples/orders*.jsonl):
# build, create a table, mount it, read two versions, cp a file into incoming/, watch `latest`
# move, see a bad file refused, unmount. Needs Linux with /dev/fuse and fusermount3 (fuse3).
#
#   scripts/demo.sh            # uses a fresh temporary folder, removed at the end
#   KEEP=1 scripts/demo.sh     # keep the table folder for a look afterwards
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

# Commands in bold only on a terminal (and without NO_COLOR): redirected output gets no escapes.
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; }
run() {
    say "$*"
    "$@"
}

[ -e /dev/fuse ] || { echo "demo.sh: /dev/fuse is missing (modprobe fuse, or run the container with --device /dev/fuse)" >&2; exit 1; }
command -v fusermount3 >/dev/null || { echo "demo.sh: fusermount3 is missing (apt-get install fuse3)" >&2; exit 1; }

echo "demo.sh: building tinydelta (the CLI) and tinydelta-mount (the FUSE mount) with"
echo "  cargo build --release   (the first build compiles every dependency: a few minutes; later ones take seconds)"
# cargo's own progress (a bar on a terminal, one line per crate elsewhere) shows it is working.
cargo build --release --bin tinydelta --bin tinydelta-mount
echo "demo.sh: built; now a table in a temporary folder, mounted, read and appended to"
export PATH="$repo/target/release:$PATH"

work="$(mktemp -d /tmp/tinydelta-demo.XXXXXX)"
table="$work/orders"
mnt="$work/mnt"
mkdir "$mnt"
cleanup() {
    if grep -qs " $mnt " /proc/self/mountinfo; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
    if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

run tinydelta create "$table" id:int! region:str year:int
run tinydelta append "$table" --file examples/orders.jsonl

# Returns only once the mount is ready; the next command can use it at once.
run tinydelta-mount "$table" "$mnt"
run ls -l "$mnt" "$mnt/v" "$mnt/v/1"

run head -n 3 "$mnt/v/1/data.jsonl"
run wc -l "$mnt/latest/data.jsonl"

# Append by copying a file: one atomic APPEND commit when cp closes it.
run cp examples/orders-2025.jsonl "$mnt/incoming/"
run readlink "$mnt/latest"
run ls "$mnt/incoming"
run wc -l "$mnt/v/1/data.jsonl" "$mnt/v/2/data.jsonl"
say "diff $mnt/v/1/data.jsonl $mnt/latest/data.jsonl"
diff "$mnt/v/1/data.jsonl" "$mnt/latest/data.jsonl" || true
run cmp "$mnt/v/2/data.jsonl" <(tinydelta read "$table" --version 2)

# A bad file: cp fails, latest stays, the bytes stay, NAME.error says why.
echo
echo "# Next, a file with a bad row (line 2 has \"year\":\"2025\", a string in an int column) is refused"
echo "# ON PURPOSE: cp's \"Invalid argument\" error below is the expected outcome, not a failure of the demo."
say "cp examples/orders-bad.jsonl $mnt/incoming/"
if cp examples/orders-bad.jsonl "$mnt/incoming/"; then echo "unexpected: the bad file was accepted" >&2; exit 1; fi
echo "# (expected: the file was refused and nothing was committed)"
run readlink "$mnt/latest"
run ls "$mnt/incoming"
run cat "$mnt/incoming/orders-bad.jsonl.error"
run rm "$mnt/incoming/orders-bad.jsonl"

run tinydelta history "$table"
run fusermount3 -u "$mnt"
echo
echo "demo.sh: OK"
