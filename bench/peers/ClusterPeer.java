/*
 * The Aeron Java cluster client of sulis' interoperability tests (tests/interop/test_cluster_interop.py):
 * Aeron's own AeronCluster, through the driver in aeron.dir, against a cluster (sulis's) whose members
 * take ingress at ingress_endpoints.
 *
 *   echo ingress_endpoints=0=host:port,... egress=URI count=N
 *   latency ingress_endpoints=... egress=URI count=N warmup=N length=N
 *   throughput ingress_endpoints=... egress=URI count=N length=N
 *   failover ingress_endpoints=... egress=URI count=N [resend_ms=3000]
 *
 * Connects (AeronCluster.connect), offers count messages (index, then bytes (i + j) & 0xff, lengths
 * 8 + (i * 37) % 400, every 97th 3000 bytes), polling egress meanwhile, and checks that the service
 * echoed each one, in order, before the deadline. Then closes the session. One JSON line:
 * {"session_id", "leadership_term_id", "leader_member_id", "sent", "received", "errors"}.
 *
 * latency sends one message of length bytes at a time and waits for its echo (warmup of them first,
 * not counted): {"p50_us", "p90_us", "p99_us", "p999_us", "max_us", "count"}, round trips in µs.
 * throughput offers count messages as fast as the cluster takes them, polling egress meanwhile,
 * until every echo is back: {"msgs_per_s", "count"}, from the first offer to the last echo.
 *
 * failover sends count messages one at a time, each echoed before the next, prints
 * {"phase": 1, "leader_member_id"} and waits for a line on stdin (the test stops the leader meanwhile),
 * then sends count more the same way: a message not echoed within resend_ms is offered again (the echo of
 * either copy counts; a copy the old leader took may or may not be in the log). The client follows the
 * NewLeaderEvent itself (Aeron's AeronCluster does). Prints {"phase": 2, "leader_member_id",
 * "leadership_term_id", "echoed", "resent", "new_leader_events", "follow_ms", "errors"}: follow_ms from
 * the line on stdin to the first echo from the new leader.
 */

import io.aeron.cluster.client.AeronCluster;
import io.aeron.cluster.client.EgressListener;
import io.aeron.cluster.codecs.EventCode;
import io.aeron.logbuffer.Header;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.UnsafeBuffer;

import java.util.*;

public final class ClusterPeer {
    static final Map<String, String> ARGS = new HashMap<>();

    public static void main(final String[] args) {
        for (int k = 1; k < args.length; k++) {
            final int eq = args[k].indexOf('=');
            ARGS.put(args[k].substring(0, eq), args[k].substring(eq + 1));
        }
        if (args.length > 0 && "latency".equals(args[0])) {
            System.exit(latency(false));
        }
        if (args.length > 0 && "throughput".equals(args[0])) {
            System.exit(latency(true));
        }
        if (args.length > 0 && "failover".equals(args[0])) {
            System.exit(failover());
        }
        if (args.length == 0 || !"echo".equals(args[0])) {
            System.err.println("usage: ClusterPeer echo|latency|throughput ingress_endpoints=... egress=URI count=N");
            System.exit(2);
        }
        System.exit(echo());
    }

    static byte[] message(final int i) {
        final int n = i % 97 == 5 ? 3000 : 8 + (i * 37) % 400;
        final byte[] m = new byte[4 + n];
        m[0] = (byte)i;
        m[1] = (byte)(i >>> 8);
        m[2] = (byte)(i >>> 16);
        m[3] = (byte)(i >>> 24);
        for (int j = 0; j < n; j++) {
            m[4 + j] = (byte)((i + j) & 0xff);
        }
        return m;
    }

    static String quote(final String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static int latency(final boolean throughput) {
        final int count = Integer.parseInt(ARGS.get("count"));
        final int warmup = Integer.parseInt(ARGS.getOrDefault("warmup", "0"));
        final int length = Integer.parseInt(ARGS.getOrDefault("length", "32"));
        final long[] received = {0};
        final EgressListener listener = (sessionId, timestamp, buffer, offset, len, header) -> received[0]++;
        final AeronCluster.Context ctx = new AeronCluster.Context()
            .ingressChannel("aeron:udp")
            .ingressEndpoints(ARGS.get("ingress_endpoints"))
            .egressChannel(ARGS.get("egress"))
            .egressListener(listener);
        try (AeronCluster cluster = AeronCluster.connect(ctx)) {
            final UnsafeBuffer buffer = new UnsafeBuffer(new byte[Math.max(length, 8)]);
            final long deadline = System.currentTimeMillis() + 120_000;
            if (throughput) {
                final long start = System.nanoTime();
                int sent = 0;
                while (sent < count && System.currentTimeMillis() < deadline) {
                    if (cluster.offer(buffer, 0, length) > 0) {
                        sent++;
                    }
                    cluster.pollEgress();
                }
                while (received[0] < count && System.currentTimeMillis() < deadline) {
                    cluster.pollEgress();
                }
                if (received[0] < count) {
                    System.out.println("{\"error\": \"" + sent + " sent, " + received[0] + " echoes within 120 s\"}");
                    return 1;
                }
                final double seconds = (System.nanoTime() - start) / 1e9;
                System.out.println("{\"msgs_per_s\": " + (long)(count / seconds) + ", \"count\": " + count + "}");
                return 0;
            }
            final long[] rtt = new long[count];
            for (int i = 0; i < warmup + count; i++) {
                final long before = received[0];
                final long t0 = System.nanoTime();
                buffer.putLong(0, t0);
                while (cluster.offer(buffer, 0, length) < 0) {
                    cluster.pollEgress();
                }
                while (received[0] == before) {
                    cluster.pollEgress();
                    if (System.currentTimeMillis() > deadline) {
                        System.out.println("{\"error\": \"no echo of round trip " + i + " within 120 s\"}");
                        return 1;
                    }
                }
                if (i >= warmup) {
                    rtt[i - warmup] = System.nanoTime() - t0;
                }
            }
            Arrays.sort(rtt);
            final java.util.function.DoubleFunction<String> at =
                (q) -> String.format(Locale.US, "%.2f", rtt[Math.min(count - 1, (int)(q * count))] / 1000.0);
            System.out.println("{\"p50_us\": " + at.apply(0.5) + ", \"p90_us\": " + at.apply(0.9) +
                ", \"p99_us\": " + at.apply(0.99) + ", \"p999_us\": " + at.apply(0.999) +
                ", \"max_us\": " + String.format(Locale.US, "%.2f", rtt[count - 1] / 1000.0) +
                ", \"count\": " + count + "}");
        }
        return 0;
    }

    static int failover() {
        final int count = Integer.parseInt(ARGS.get("count"));
        final long resendNs = Long.parseLong(ARGS.getOrDefault("resend_ms", "3000")) * 1_000_000L;
        final List<String> errors = new ArrayList<>();
        final Set<Integer> echoed = new HashSet<>();
        final int[] newLeaders = {0};
        final EgressListener listener = new EgressListener() {
            public void onMessage(
                final long clusterSessionId,
                final long timestamp,
                final DirectBuffer buffer,
                final int offset,
                final int length,
                final Header header) {
                final int i = buffer.getInt(offset, java.nio.ByteOrder.LITTLE_ENDIAN);
                final byte[] got = new byte[length];
                buffer.getBytes(offset, got);
                if (!Arrays.equals(message(i), got) && errors.size() < 10) {
                    errors.add("echo " + i + " differs (" + length + " bytes)");
                }
                echoed.add(i);
            }

            public void onSessionEvent(
                final long correlationId,
                final long clusterSessionId,
                final long leadershipTermId,
                final int leaderMemberId,
                final EventCode code,
                final String detail) {
                if (code != EventCode.OK) {
                    errors.add("session event " + code + " " + detail);
                }
            }

            public void onNewLeader(
                final long clusterSessionId,
                final long leadershipTermId,
                final int leaderMemberId,
                final String ingressEndpoints) {
                newLeaders[0]++;
            }
        };
        final AeronCluster.Context ctx = new AeronCluster.Context()
            .ingressChannel("aeron:udp")
            .ingressEndpoints(ARGS.get("ingress_endpoints"))
            .egressChannel(ARGS.get("egress"))
            .egressListener(listener)
            .messageTimeoutNs(30_000_000_000L);
        int resent = 0;
        long followMs = -1;
        try (AeronCluster cluster = AeronCluster.connect(ctx)) {
            final UnsafeBuffer buffer = new UnsafeBuffer(new byte[8192]);
            for (int phase = 1; phase <= 2; phase++) {
                final long phaseStart = System.nanoTime();
                final long deadline = System.currentTimeMillis() + 60_000;
                for (int i = (phase - 1) * count; i < phase * count && errors.isEmpty(); i++) {
                    final byte[] m = message(i);
                    buffer.putBytes(0, m);
                    long offeredAt = 0;
                    while (!echoed.contains(i)) {
                        if (System.currentTimeMillis() > deadline) {
                            errors.add("no echo of message " + i + " within 60 s");
                            break;
                        }
                        if (offeredAt == 0 || System.nanoTime() - offeredAt > resendNs) {
                            if (cluster.offer(buffer, 0, m.length) > 0) {
                                resent += offeredAt == 0 ? 0 : 1;
                                offeredAt = System.nanoTime();
                            }
                        }
                        if (cluster.pollEgress() == 0) {
                            Thread.yield();
                        }
                    }
                    if (phase == 2 && followMs < 0 && echoed.contains(i)) {
                        followMs = (System.nanoTime() - phaseStart) / 1_000_000;
                    }
                }
                System.out.println("{\"phase\": " + phase + ", \"leader_member_id\": " + cluster.leaderMemberId() +
                    ", \"leadership_term_id\": " + cluster.leadershipTermId() + ", \"echoed\": " + echoed.size() +
                    ", \"resent\": " + resent + ", \"new_leader_events\": " + newLeaders[0] +
                    ", \"follow_ms\": " + followMs + ", \"errors\": " + errors.size() +
                    (errors.isEmpty() ? "" : ", \"first_error\": " + quote(errors.get(0))) + "}");
                System.out.flush();
                if (phase == 1) {
                    try {
                        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
                    } catch (final java.io.IOException e) {
                        errors.add(e.toString());
                    }
                }
            }
        }
        return errors.isEmpty() ? 0 : 1;
    }

    static int echo() {
        final int count = Integer.parseInt(ARGS.get("count"));
        final List<String> errors = new ArrayList<>();
        final int[] received = {0};
        final EgressListener listener = new EgressListener() {
            public void onMessage(
                final long clusterSessionId,
                final long timestamp,
                final DirectBuffer buffer,
                final int offset,
                final int length,
                final Header header) {
                final byte[] want = message(received[0]);
                final byte[] got = new byte[length];
                buffer.getBytes(offset, got);
                if (!Arrays.equals(want, got) && errors.size() < 10) {
                    errors.add("echo " + received[0] + " differs (" + length + " bytes)");
                }
                received[0]++;
            }

            public void onSessionEvent(
                final long correlationId,
                final long clusterSessionId,
                final long leadershipTermId,
                final int leaderMemberId,
                final EventCode code,
                final String detail) {
                if (code != EventCode.OK) {
                    errors.add("session event " + code + " " + detail);
                }
            }
        };
        final AeronCluster.Context ctx = new AeronCluster.Context()
            .ingressChannel("aeron:udp")
            .ingressEndpoints(ARGS.get("ingress_endpoints"))
            .egressChannel(ARGS.get("egress"))
            .egressListener(listener);
        final long sessionId;
        final long term;
        final int leader;
        int sent = 0;
        try (AeronCluster cluster = AeronCluster.connect(ctx)) {
            sessionId = cluster.clusterSessionId();
            term = cluster.leadershipTermId();
            leader = cluster.leaderMemberId();
            final UnsafeBuffer buffer = new UnsafeBuffer(new byte[8192]);
            final long deadline = System.currentTimeMillis() + 60_000;
            while (sent < count) {
                final byte[] m = message(sent);
                buffer.putBytes(0, m);
                if (cluster.offer(buffer, 0, m.length) > 0) {
                    sent++;
                } else if (System.currentTimeMillis() > deadline) {
                    errors.add("offer stuck at " + sent);
                    break;
                }
                cluster.pollEgress();
            }
            while (received[0] < count && System.currentTimeMillis() < deadline) {
                if (cluster.pollEgress() == 0) {
                    Thread.yield();
                }
            }
            if (received[0] < count) {
                errors.add("echoes stuck at " + received[0]);
            }
        }
        final StringBuilder e = new StringBuilder("[");
        for (int k = 0; k < errors.size(); k++) {
            e.append(k > 0 ? ", " : "").append(quote(errors.get(k)));
        }
        System.out.println("{\"session_id\": " + sessionId + ", \"leadership_term_id\": " + term +
            ", \"leader_member_id\": " + leader + ", \"sent\": " + sent + ", \"received\": " + received[0] +
            ", \"errors\": " + e.append("]") + "}");
        return 0;
    }
}
