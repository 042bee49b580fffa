"""The echo service ``sulis cluster-node`` runs in bench/cluster_latency.py: each message straight back."""

from sulis.cluster import OFFER_AGAIN, ClusteredService


class Echo(ClusteredService):
    """Answers every client message with itself."""

    def on_session_message(self, cluster, session_id, timestamp, payload):
        if session_id is not None:
            while cluster.offer(session_id, payload) in OFFER_AGAIN:
                cluster.idle()
