"""The echo services ``sulis cluster-node`` runs in bench/cluster_latency.py: each message straight back, one
Python call per message (``Echo``) or per batch of the log's messages (``BatchedEcho``)."""

from sulis.cluster import OFFER_AGAIN, ClusteredService


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
        sent = 0
        while sent < len(ids):
            result = cluster.offer_batch(ids[sent:], data, offsets[sent:])
            sent += result
            if result.code in OFFER_AGAIN:
                cluster.idle()
            elif result.code is not None:
                sent += 1  # that client is gone: its answer cannot go, the others' can
