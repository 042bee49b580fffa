#!/usr/bin/env bash
# Builds the JVM source of format("sulis"): the Rust core's JNI library (crates/sulis-jni, release)
# and the Java adapter (jvm/), compiled against the jars the pip-installed pyspark ships, into
# python/sulis/jars/sulis-spark.jar (the library inside it), with the service file that registers
# format("sulis") in the JVM. Needs a JDK 17 (javac, jar).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"
jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
cargo build --release -q -p sulis-jni
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mapfile -t sources < <(find jvm/src/main/java -name '*.java' | sort)
javac --release 17 -nowarn -d "$work/classes" -cp "$jars/*" "${sources[@]}"
cp -r jvm/src/main/resources/. "$work/classes/"
mkdir -p "$work/classes/native"
cp target/release/libsulis_jni.so "$work/classes/native/"
mkdir -p python/sulis/jars
jar cf python/sulis/jars/sulis-spark.jar -C "$work/classes" .
echo "built python/sulis/jars/sulis-spark.jar"
