"""The echo services ``sulis cluster-node`` runs in bench/cluster_latency.py: each message straight back, one
Python call per message (``Echo``) or per batch of the log's messages (``BatchedEcho``)."""

from sulis.cluster import OFFER_AGAIN, ClusteredService


def answer(cluster, ids, data, offsets) -> None:
    """Sends answer ``i`` (``data[offsets[i]:offsets[i + 1]]``) to session ``ids[i]`` with ``offer_batch``, in the
    documented loop: idle on a code in OFFER_AGAIN, skip an answer on any other (its client is gone)."""
    sent = 0
    while sent < len(ids):
        result = cluster.offer_batch(ids[sent:], data, offsets[sent:])
        sent += result
        if result.code in OFFER_AGAIN:
            cluster.idle()
        elif result.code is not None:
            sent += 1


class Echo(ClusteredService):
    """Answers every client message with itself."""

    def on_session_message(self, cluster, session_id, timestamp, payload):
        if session_id is not None:
            while cluster.offer(session_id, payload) in OFFER_AGAIN:
                cluster.idle()


class BatchedEcho(ClusteredService):
    """Answers every client message with itself, a batch of them at once (``on_session_messages``)."""

    def on_session_messages(self, cluster, messages):
        import numpy as np

        ids = np.frombuffer(messages.session_ids, np.int64)
        offsets = np.frombuffer(messages.offsets, np.int32)
        if not np.all(ids > 0):  # the service's own messages are not answered
            keep = np.flatnonzero(ids > 0)
            data = b"".join(messages[int(i)] for i in keep)
            ids = ids[keep]
            offsets = np.concatenate(([0], np.cumsum(np.diff(offsets)[keep]))).astype(np.int32)
        else:
            data = messages.data
        answer(cluster, ids, data, offsets)


class Ledger(ClusteredService):
    """A batched ledger (what a user of the batched path writes): 10,000 accounts in numpy, each message a 32 B
    transfer (from, to, amount, id: int64; the accounts taken modulo 10,000), applied in log order and answered
    with the sender's balance, a batch's answers with one ``offer_batch``. Its snapshot is the balances (80 KB),
    so a member restarted from one replays only the log after it."""

    ACCOUNTS = 10_000

    def __init__(self) -> None:
        import numpy as np

        self.balances = np.full(self.ACCOUNTS, 1_000_000, np.int64)

    def on_start(self, cluster, snapshot):
        import numpy as np

        if snapshot is not None:
            self.balances = np.frombuffer(snapshot[0], np.int64).copy()

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(self.balances.tobytes())

    def on_session_messages(self, cluster, messages):
        import numpy as np

        ids = np.frombuffer(messages.session_ids, np.int64)
        offsets = np.frombuffer(messages.offsets, np.int32)
        raw = np.frombuffer(messages.data, np.uint8)
        if np.all(ids > 0) and np.all(np.diff(offsets) == 32):
            rows = raw.reshape(-1, 32)  # the usual batch: transfers back to back, read in place
        else:  # the service's own messages, or others, among them: the transfers only
            keep = np.flatnonzero((ids > 0) & (np.diff(offsets) == 32))
            rows, ids = np.stack([raw[offsets[i]:offsets[i] + 32] for i in keep]).reshape(-1, 32), ids[keep]
        if len(ids) == 0:
            return
        t = rows.view(np.int64)
        src, dst, amount = t[:, 0] % self.ACCOUNTS, t[:, 1] % self.ACCOUNTS, t[:, 2]
        np.subtract.at(self.balances, src, amount)
        np.add.at(self.balances, dst, amount)
        data = self.balances[src].tobytes()  # each sender's balance after the batch
        ends = np.arange(0, 8 * len(ids) + 1, 8, dtype=np.int32)
        answer(cluster, ids, data, ends)
