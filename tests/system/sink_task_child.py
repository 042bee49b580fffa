"""One attempt of an exactly-once sink task in a process of its own, as a Spark Python worker runs it,
for the sink's fault tests: the writer is the one ``format("sulis")`` builds from the options, the
task context is the one Spark's worker sets (batch id, query id, partition, attempt numbers), and the
rows are ``row-<i>`` for the asked indices, in Arrow batches of ``chunk`` rows.

usage: sink_task_child.py JSON

JSON: {"writer": a file holding the pickled writer (Spark builds it once, on its driver, when the
       query starts, and ships it with every task), "query": str, "batch": int, "partition": int,
       "task_attempt_id": int, "attempt_number": int, "rows": [int, ...] or [first, count] as
       {"first": f, "count": n}, "chunk": int, "pause": seconds after each chunk,
       "stall_at": row index before which to stop and wait for ever (or null)}

Prints a JSON line {"yielded": n} before it hands each chunk on, then {"published": n, "skipped": n}
or {"error": "..."} (exit 1).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    spec = json.loads(sys.argv[1])
    import pickle

    import pyarrow as pa
    from pyspark import TaskContext

    rows = spec["rows"]
    if isinstance(rows, dict):
        rows = list(range(rows["first"], rows["first"] + rows["count"]))
    with open(spec["writer"], "rb") as f:
        writer = pickle.load(f)
    TaskContext._setTaskContext(TaskContext(
        stageId=7, partitionId=spec["partition"], attemptNumber=spec.get("attempt_number", 0),
        taskAttemptId=spec["task_attempt_id"], cpus=1, resources={},
        localProperties={"streaming.sql.batchId": str(spec["batch"]), "sql.streaming.queryId": spec["query"]}))
    chunk, pause, stall_at = spec.get("chunk", 500), spec.get("pause", 0.0), spec.get("stall_at")

    def batches():
        for i in range(0, len(rows), chunk):
            if stall_at is not None and i >= stall_at:
                print(json.dumps({"stalled": i}), flush=True)
                while True:
                    time.sleep(1)
            part = rows[i:i + chunk]
            print(json.dumps({"yielded": i + len(part)}), flush=True)
            yield pa.record_batch([pa.array([b"row-%08d" % r for r in part], pa.binary())], names=["value"])
            time.sleep(pause)

    try:
        commit = writer.write(batches())
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps({"published": commit.published, "skipped": commit.skipped}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
