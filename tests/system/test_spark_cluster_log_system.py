"""``format("sulis")`` over a cluster member's committed log (``clusterDir``), against three ``sulis cluster-node``
processes on loopback: each member's log read equals what its service applied; the read never passes the
member's commit position (both followers paused while the leader appends); a streaming query on a follower's
log goes through a SIGKILL of the leader, the election and the killed member's restart. Its own module (its
own Spark session) so that it is not the tail of the Spark module's run, beside the three-host Spark test.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")

import sulis  # noqa: E402
from clusterprocs import journal_cluster  # noqa: E402
from conftest import await_until  # noqa: E402
from sulis.spark.cluster_log import COMMIT_POSITION_TYPE_ID, log_recording_ids  # noqa: E402

pytestmark = pytest.mark.spark


def test_a_cluster_members_log_is_read_to_its_commit_position_never_past_it(spark, make_driver, tmp_path):
    """``clusterDir``: three ``sulis cluster-node`` processes; each member's log read by Spark holds exactly
    what its service applied, in order. With both followers paused the leader appends what no quorum
    recorded: its log then runs past its commit position and the read stops at the commit position. A
    streaming query on a follower's log goes on through a SIGKILL of the leader and the election, and the
    killed member, restarted, reads as the others do (what it had appended uncommitted truncated or
    committed by the election, never read before)."""
    echoed: list[str] = []

    def send(c, texts):
        """Each text offered until echoed. One offered just as the leader lost its term may never reach the
        log: offered again once the client follows a new leader (so it may be in the log twice)."""
        for text in texts:
            for attempt in range(3):
                term = c.leadership_term_id
                await_until(lambda text=text: c.offer(text.encode()) > 0, 20, f"ingress to take {text}")
                try:
                    await_until(lambda text=text: c.poll_egress(lambda p, t: echoed.append(p.decode())) >= 0
                                and text in echoed, 15, f"the echo of {text}")
                    break
                except AssertionError:
                    if attempt == 2 or c.leadership_term_id == term:
                        raise

    def log_rows(n, **options):
        reader = spark.read.format("sulis").option("clusterDir", n.cluster_dir).option("driverDir", n.driver_dir)
        for k, v in options.items():
            reader = reader.option(k, str(v))
        rows = reader.load().collect()
        return sorted((r.position, bytes(r.value).decode(), r.cluster_session_id, r.leadership_term_id, r.timestamp)
                      for r in rows)

    def check_log(n, session_id, **options):
        """The member's log as read equals its service's journal, every row of the client's session."""
        rows = log_rows(n, **options)
        assert [r[1] for r in rows] == n.journal_lines(), n.id
        assert {r[2] for r in rows} == {session_id}
        assert [r[3] for r in rows] == sorted(r[3] for r in rows)  # terms only rise along the log
        return rows

    def commit_of(n) -> int:
        return next(c["value"] for c in sulis.CountersReader(n.driver_dir).counters()
                    if c["type_id"] == COMMIT_POSITION_TYPE_ID)

    query = None
    # A leader with no active follower for the heartbeat timeout steps down (and stops appending): 6 s, so a
    # busy machine still has it append while both followers are paused below. The client is silent while
    # Spark reads: a session timeout of its own, so a slow read does not close its session.
    with journal_cluster(tmp_path, make_driver().dir,
                         extra=("--leader-heartbeat-timeout", "6s", "--session-timeout", "120s")) as (nodes, c):
        try:
            send(c, [f"m{i}" for i in range(100)])
            session_id, leader = c.cluster_session_id, c.leader_member_id
            for n in nodes:
                await_until(lambda n=n: len(n.journal_lines()) >= 100, 20, f"member {n.id}'s journal")
                rows = check_log(n, session_id, readMode="replay" if n.id == leader else "auto")
                assert [r[1] for r in rows] == [f"m{i}" for i in range(100)]
                stamps = [r[4] for r in rows]
                assert stamps == sorted(stamps) and abs(time.time() - stamps[-1].timestamp()) < 120, stamps[-1]

            # Both followers paused: the leader takes u0..u4 into its log, which no quorum records.
            lead = nodes[leader]
            followers = [n for n in nodes if n.id != leader]
            for n in followers:
                n.pause()
            for i in range(5):
                await_until(lambda i=i: c.offer(f"u{i}".encode()) > 0, 20, f"ingress to take u{i}")
            client = sulis.Client(dir=lead.driver_dir)
            archive = sulis.ArchiveClient(client)
            log_id = log_recording_ids(lead.cluster_dir)[-1]
            try:
                await_until(lambda: archive.get_recording_position(log_id) > commit_of(lead), 10,
                            "the leader to append past its commit position")
            except AssertionError:
                raise AssertionError(f"member {lead.id} recorded {archive.get_recording_position(log_id)}, committed "
                                     f"{commit_of(lead)}, client's leader {c.leader_member_id}\n"
                                     + "\n".join(f"member {n.id}: {n.stderr()[-1500:]}" for n in nodes)) from None
            commit = commit_of(lead)
            rows = log_rows(lead)
            recorded, commit_after = archive.get_recording_position(log_id), commit_of(lead)
            archive.close()
            client.close()
            assert commit_after == commit and recorded > commit, (commit, commit_after, recorded)
            assert [r[1] for r in rows] == [f"m{i}" for i in range(100)] and rows[-1][0] <= commit
            for n in followers:
                n.resume()

            # A streaming query on a follower's log through the leader's SIGKILL, the election and its restart.
            reader = followers[0]
            out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
            query = (spark.readStream.format("sulis").option("clusterDir", reader.cluster_dir)
                     .option("driverDir", reader.driver_dir).load()
                     .writeStream.format("parquet").option("checkpointLocation", checkpoint)
                     .trigger(processingTime="1 second").start(out))
            send(c, [f"m{i}" for i in range(100, 150)])
            lead.kill()
            await_until(lambda: c.poll_egress(lambda p, t: echoed.append(p.decode())) >= 0
                        and c.leader_member_id != leader, 30, "the client to follow a new leader")
            send(c, [f"m{i}" for i in range(150, 200)])
            lead.start()
            send(c, [f"m{i}" for i in range(200, 250)])
            for n in nodes:
                await_until(lambda n=n: "m249" in n.journal_lines(), 30, f"member {n.id}'s journal")
            query.processAllAvailable()
            query.stop()
            streamed = sorted((r.position, bytes(r.value).decode()) for r in spark.read.parquet(out).collect())
            assert [v for _, v in streamed] == reader.journal_lines()
            assert len({p for p, _ in streamed}) == len(streamed)  # each entry once
            journals = [n.journal_lines() for n in nodes]
            assert journals[0] == journals[1] == journals[2]
            assert [x for x in dict.fromkeys(journals[0]) if x.startswith("m")] == [f"m{i}" for i in range(250)]
            for n in nodes:
                check_log(n, session_id)
            c.close()
        finally:
            if query is not None and query.isActive:
                query.stop()
