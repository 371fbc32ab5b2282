#!/usr/bin/env bash
# Spark 4 for the opt-in `spark` tests (`python -m pytest -m spark` calls this script; so can
# you): pyspark in the current Python, a Java Spark 4 runs on, and the jars Spark is given
# with `spark.jars`.
#
#   scripts/spark.sh setup       install pyspark (the `spark` extra) where it is missing and
#                                fetch the jars that are not cached yet
#   scripts/spark.sh jars        setup, then print the jars, comma-separated (for spark.jars)
#   scripts/spark.sh java-home   print the JAVA_HOME Spark runs with (a Java 17 or 21)
#
# The jars are fetched with Maven (`mvn dependency:copy`) into $LAKELOCK_SPARK_HOME (default
# ~/.cache/lakelock/spark)/jars, never through Spark's own `spark.jars.packages`:
#   iceberg-spark-runtime and iceberg-aws-bundle: Iceberg tables, S3FileIO (the AWS SDK v2);
#   hadoop-aws (Spark's Hadoop version) and the SDK's s3-transfer-manager: s3a:// paths, which
#     Delta tables and Iceberg tables loaded by path read through (the SDK from the bundle);
#   delta-spark and delta-storage: Delta tables, fetched where they resolve (the tests that
#     need them are skipped, saying so, where they do not).
# The Python is $PYTHON (default: `python`, the active virtual environment's).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="${LAKELOCK_SPARK_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lakelock/spark}"
JARS="$HOME_DIR/jars"
PYTHON="${PYTHON:-python}"
# iceberg-spark-runtime-4.0 is built for Spark 4.0: the `spark` extra pins pyspark to 4.0.x.
SPARK_LINE="4.0"
ICEBERG="1.11.0"
HADOOP="3.4.1"      # the hadoop-client jars pyspark 4.0 ships
AWS_SDK="2.44.4"    # the AWS SDK inside iceberg-aws-bundle $ICEBERG
DELTA="4.0.1"       # Delta Lake's release for Spark 4.0
REQUIRED=(
    "org.apache.iceberg:iceberg-spark-runtime-${SPARK_LINE}_2.13:$ICEBERG"
    "org.apache.iceberg:iceberg-aws-bundle:$ICEBERG"
    "org.apache.hadoop:hadoop-aws:$HADOOP"
    "software.amazon.awssdk:s3-transfer-manager:$AWS_SDK"
)
OPTIONAL=(
    "io.delta:delta-spark_2.13:$DELTA"
    "io.delta:delta-storage:$DELTA"
)

java_major() {
    # The major version `$1/bin/java -version` reports (17 from "17.0.15", 1 from "1.8.0").
    "$1/bin/java" -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -n 1
}

java_home() {
    local candidate major java
    java=$(command -v java 2>/dev/null || true)
    for candidate in "${LAKELOCK_SPARK_JAVA_HOME:-}" "${JAVA_HOME:-}" \
        "${java:+$(dirname "$(dirname "$(readlink -f "$java")")")}" /usr/lib/jvm/*; do
        [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] || continue
        major=$(java_major "$candidate")
        if [ "$major" = "17" ] || [ "$major" = "21" ]; then
            echo "$candidate"
            return 0
        fi
    done
    echo "spark.sh: Spark 4 needs Java 17 or 21; none found" \
        "(set LAKELOCK_SPARK_JAVA_HOME)" >&2
    return 1
}

jar_name() {
    # group:artifact:version -> artifact-version.jar
    local artifact version
    artifact=$(echo "$1" | cut -d: -f2)
    version=$(echo "$1" | cut -d: -f3)
    echo "$artifact-$version.jar"
}

fetch() {
    [ -f "$JARS/$(jar_name "$1")" ] && return 0
    mvn -q -B dependency:copy -Dartifact="$1" -DoutputDirectory="$JARS" >"$HOME_DIR/mvn.log" 2>&1
}

setup() {
    java_home >/dev/null
    mkdir -p "$JARS"
    if ! "$PYTHON" -c 'import pyspark' 2>/dev/null; then
        # The `spark` extra's requirements, as pyproject.toml states them.
        local requirements
        mapfile -t requirements < <("$PYTHON" -c 'import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(*tomllib.load(f)["project"]["optional-dependencies"]["spark"], sep="\n")' \
            "$ROOT/pyproject.toml")
        "$PYTHON" -m pip install --quiet "${requirements[@]}"
    fi
    local version
    version=$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)')
    case "$version" in
    "$SPARK_LINE".*) ;;
    *)
        echo "spark.sh: pyspark $version is installed; the jars here are for Spark $SPARK_LINE" >&2
        return 1
        ;;
    esac
    local artifact
    if ! command -v mvn >/dev/null 2>&1; then
        for artifact in "${REQUIRED[@]}"; do
            if [ ! -f "$JARS/$(jar_name "$artifact")" ]; then
                echo "spark.sh: Maven (mvn) is needed to fetch $artifact" >&2
                return 1
            fi
        done
        return 0
    fi
    for artifact in "${REQUIRED[@]}"; do
        if ! fetch "$artifact"; then
            echo "spark.sh: Maven could not fetch $artifact:" >&2
            tail -n 5 "$HOME_DIR/mvn.log" >&2
            return 1
        fi
    done
    for artifact in "${OPTIONAL[@]}"; do
        fetch "$artifact" || echo "spark.sh: $artifact did not resolve; Delta tables unread" >&2
    done
}

jars() {
    setup >&2
    local artifact list=()
    for artifact in "${REQUIRED[@]}" "${OPTIONAL[@]}"; do
        [ -f "$JARS/$(jar_name "$artifact")" ] && list+=("$JARS/$(jar_name "$artifact")")
    done
    (IFS=,; echo "${list[*]}")
}

case "${1:-}" in
setup) setup ;;
jars) jars ;;
java-home) java_home ;;
*)
    echo "usage: $0 setup | jars | java-home" >&2
    exit 2
    ;;
esac
