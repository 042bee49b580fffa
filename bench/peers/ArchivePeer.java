/*
 * The Aeron Java archive client of sulis' interoperability tests (tests/interop/test_archive_interop.py):
 * Aeron's own AeronArchive, driving an archive (sulis's) through the driver in aeron.dir.
 * Compiled by bench/peers/aeron.py against the current aeron-all jar only: Aeron 1.15.1's archive
 * speaks the pre-1.16 protocol (schema id 1), which sulis does not (docs/archive.md).
 *
 *   client control=URI response=URI channel=URI stream=N count=N replay_channel=URI replay_stream=N
 *   replicate control=URI response=URI src_control=URI src_recording=N count=N replay_channel=URI replay_stream=N
 *             [src_stream=N] [dst_recording=N] [stop=N] [replication_channel=URI] [session_id=N]
 *             [src_response=URI] [file_io_max=N] [channel_tag=N] [subscription_tag=N] [live_destination=URI]
 *             [stop_after_ms=N] [timeout_s=N]
 *   publish channel=URI stream=N [destinations=URI,URI...]
 *
 * Starts a recording of channel/stream, publishes count messages of tests/interop/stream.py's kind
 * (index, then bytes (i + j) & 0xff, lengths 8 + (i * 37) % 400, every 97th 5000 bytes), finds the
 * recording by its rec-pos counter (RecordingPos, as Aeron users do), waits until it is recorded,
 * stops it, lists it, replays it and checks every message. Then: a bounded replay limited by a
 * counter of the archive's driver (the first half of the messages, nothing more until the counter is
 * closed); the recording truncated to its first half; extended from there by a publication placed at
 * its stop position, while a replay follows it live; every message checked each time. One JSON line:
 * {"recording_id", "archive_id", "stop_position", "descriptor": {...}, "replayed", "bounded",
 * "followed", "extended_stop", "errors"}.
 *
 * replicate asks the archive (an Aeron one, say) to copy recording src_recording of the archive whose
 * control channel is src_control (sulis's, say) with AeronArchive.replicate and ReplicationParams
 * (ReplicateRequest2): into a new recording, or dst_recording continued; up to stop if given; stopped
 * by stopReplication stop_after_ms after its EXTEND signal if given. It gathers the recording signals
 * of its control session (pollForRecordingSignals) until REPLICATE_END of that replication, lists the
 * copy, and replays it from its start: the first count messages of the stream above must come back.
 * One JSON line: {"replication_id", "signals": [{"signal", "correlation_id", "recording_id",
 * "subscription_id", "position"}...], "descriptor", "replayed", "errors"}; the archive's asynchronous
 * errors are among "errors".
 *
 * publish is a publisher of those messages on an exclusive publication (with manual multi-destination
 * control, channel "aeron:udp?control-mode=manual", it sends to each of destinations), driven by its
 * standard input: "publish N" offers the next N messages and prints {"position"} once they are in;
 * "close" or the end of input closes it. It first prints {"session_id", "initial_term_id"}.
 */

import io.aeron.*;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.client.ReplayParams;
import io.aeron.archive.client.ArchiveException;
import io.aeron.archive.client.RecordingDescriptorConsumer;
import io.aeron.archive.client.RecordingSignalConsumer;
import io.aeron.archive.client.ReplicationParams;
import io.aeron.archive.codecs.RecordingSignal;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.archive.status.RecordingPos;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.CountersReader;

import java.nio.ByteOrder;
import java.util.*;

public final class ArchivePeer {
    static final Map<String, String> ARGS = new HashMap<>();

    public static void main(final String[] args) throws Exception {
        for (int k = 1; k < args.length; k++) {
            final int eq = args[k].indexOf('=');
            ARGS.put(args[k].substring(0, eq), args[k].substring(eq + 1));
        }
        if (args.length > 0 && "client".equals(args[0])) System.exit(client());
        if (args.length > 0 && "replicate".equals(args[0])) System.exit(replicate());
        if (args.length > 0 && "publish".equals(args[0])) System.exit(publish());
        if (args.length > 0 && "response".equals(args[0])) System.exit(responseClient());
        System.err.println("ArchivePeer: usage: client|replicate|publish key=value ...");
        System.exit(2);
    }

    static String arg(final String key, final String otherwise) {
        return ARGS.getOrDefault(key, otherwise);
    }

    static String arg(final String key) {
        final String v = ARGS.get(key);
        if (v == null) {
            System.err.println("ArchivePeer: missing " + key + "=");
            System.exit(2);
        }
        return v;
    }

    static byte[] message(final int i) {
        final int n = i % 97 == 5 ? 5000 : 8 + (i * 37) % 400;
        final byte[] m = new byte[4 + n];
        m[0] = (byte)i; m[1] = (byte)(i >>> 8); m[2] = (byte)(i >>> 16); m[3] = (byte)(i >>> 24);
        for (int j = 0; j < n; j++) m[4 + j] = (byte)(i + j);
        return m;
    }

    static String quote(final String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /**
     * Replays recording {@code recording_id} ({@code count} messages) over response channels, as a client
     * with no address of its own: {@code AeronArchive.replay}, then {@code startReplay} onto a subscription of
     * its own ({@code ReplayParams.subscriptionRegistrationId}). Prints one JSON line.
     */
    static int responseClient() throws Exception {
        final long recordingId = Long.parseLong(arg("recording_id"));
        final int count = Integer.parseInt(arg("count"));
        final String replayChannel = arg("replay_channel");
        final int replayStream = Integer.parseInt(arg("replay_stream"));
        final List<String> errors = new ArrayList<>();
        final AeronArchive.Context ctx = new AeronArchive.Context()
            .controlRequestChannel(arg("control"))
            .controlRequestStreamId(10)
            .controlResponseChannel(arg("response"))
            .controlResponseStreamId(20);
        final long deadline = System.currentTimeMillis() + 60_000;
        final long archiveId;
        final long replayed;
        final long started;
        try (AeronArchive archive = AeronArchive.connect(ctx)) {
            archiveId = archive.archiveId();
            // The ReplayParams form: the one that goes over a response channel.
            try (Subscription sub = archive.replay(recordingId, replayChannel, replayStream,
                new ReplayParams().position(0).length(AeronArchive.REPLAY_ALL_AND_STOP))) {
                replayed = readAndCheck(sub, 0, count, deadline, errors, "replay");
            }
            try (Subscription sub = archive.context().aeron().addSubscription(replayChannel, replayStream + 1)) {
                final ReplayParams params = new ReplayParams().position(0).length(AeronArchive.REPLAY_ALL_AND_STOP);
                params.subscriptionRegistrationId(sub.registrationId());
                archive.startReplay(recordingId, replayChannel, replayStream + 1, params);
                started = readAndCheck(sub, 0, count, deadline, errors, "startReplay");
            }
        }
        System.out.println("{\"archive_id\": " + archiveId + ", \"replayed\": " + replayed + ", \"started\": "
            + started + ", \"errors\": " + jsonList(errors) + "}");
        return 0;
    }

    static int client() throws Exception {
        final String channel = arg("channel");
        final int stream = Integer.parseInt(arg("stream"));
        final int count = Integer.parseInt(arg("count"));
        final List<String> errors = new ArrayList<>();
        final AeronArchive.Context ctx = new AeronArchive.Context()
            .controlRequestChannel(arg("control"))
            .controlRequestStreamId(10)
            .controlResponseChannel(arg("response"))
            .controlResponseStreamId(20);
        try (AeronArchive archive = AeronArchive.connect(ctx)) {
            final Aeron aeron = archive.context().aeron();
            final long subscriptionId = archive.startRecording(channel, stream, SourceLocation.LOCAL);
            final Publication publication = aeron.addPublication(channel, stream);
            final CountersReader counters = aeron.countersReader();
            int counterId;
            final long deadline = System.currentTimeMillis() + 20_000;
            while ((counterId = RecordingPos.findCounterIdBySession(
                counters, publication.sessionId(), archive.archiveId())) == CountersReader.NULL_COUNTER_ID) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no rec-pos counter");
                Thread.sleep(1);
            }
            final long recordingId = RecordingPos.getRecordingId(counters, counterId);
            final long[] ends = new long[count];
            for (int i = 0; i < count; i++) {
                final byte[] m = message(i);
                final UnsafeBuffer b = new UnsafeBuffer(m);
                while ((ends[i] = publication.offer(b, 0, m.length)) < 0) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException("offer stuck at " + i);
                    Thread.yield();
                }
            }
            final long end = publication.position();
            while (counters.getCounterValue(counterId) < end) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("recording stuck");
                Thread.sleep(1);
            }
            if (archive.getRecordingPosition(recordingId) != end) errors.add("getRecordingPosition != end");
            archive.stopRecording(subscriptionId);
            publication.close();
            long stop;
            while ((stop = archive.getStopPosition(recordingId)) == AeronArchive.NULL_POSITION) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no stop position");
                Thread.sleep(1);
            }
            if (stop != end) errors.add("stop position " + stop + " != " + end);
            final StringBuilder descriptor = new StringBuilder();
            if (archive.listRecordingsForUri(0, 10, channel, stream, describer(descriptor)) != 1) {
                errors.add("listed != 1");
            }
            final long replayed = replayAndCheck(archive, recordingId, 0, end, count, deadline + 20_000, errors);
            final long later = deadline + 60_000;
            final String replayChannel = arg("replay_channel");
            final int replayStream = Integer.parseInt(arg("replay_stream"));
            final int half = count / 2;

            // Bounded by a counter of the archive's driver: the first half, then nothing until it closes.
            long bounded;
            try (Counter limit = aeron.addCounter(1001, "replay limit")) {
                limit.setOrdered(ends[half - 1]);
                final long id = archive.startBoundedReplay(
                    recordingId, 0, Long.MAX_VALUE, limit.id(), replayChannel, replayStream + 1);
                try (Subscription sub = aeron.addSubscription(
                    ChannelUri.addSessionId(replayChannel, (int)id), replayStream + 1)) {
                    bounded = readAndCheck(sub, 0, half, later, errors, "bounded replay");
                    Thread.sleep(100);
                    if (sub.poll((b, o, n, h) -> errors.add("bounded replay went past its counter"), 10) > 0) {
                        bounded++;
                    }
                }
            }

            // Truncated to its first half, then extended from there while a replay follows it live.
            archive.truncateRecording(recordingId, ends[half - 1]);
            if (archive.getStopPosition(recordingId) != ends[half - 1]) errors.add("truncated stop position");
            final int[] geometry = new int[2];
            archive.listRecording(recordingId, (cs, k, rid, t0, t1, p0, p1, initialTermId, seg, termLength, mtu,
                sid, strm, stripped, original, source) -> {
                geometry[0] = initialTermId;
                geometry[1] = termLength;
            });
            final String extension = new ChannelUriStringBuilder(channel)
                .initialPosition(ends[half - 1], geometry[0], geometry[1]).build();
            final long extensionSubscription =
                archive.extendRecording(recordingId, extension, stream, SourceLocation.LOCAL);
            long followed;
            long extendedStop;
            try (ExclusivePublication ext = aeron.addExclusivePublication(extension, stream)) {
                while (archive.getRecordingPosition(recordingId) == AeronArchive.NULL_POSITION) {
                    if (System.currentTimeMillis() > later) throw new IllegalStateException("extension not recording");
                    Thread.sleep(1);
                }
                final long id = archive.startReplay(recordingId, 0, Long.MAX_VALUE, replayChannel, replayStream + 2);
                try (Subscription follow = aeron.addSubscription(
                    ChannelUri.addSessionId(replayChannel, (int)id), replayStream + 2)) {
                    followed = readAndCheck(follow, 0, half, later, errors, "following replay");
                    for (int i = half; i < count; i++) {
                        final byte[] m = message(i);
                        final UnsafeBuffer b = new UnsafeBuffer(m);
                        while (ext.offer(b, 0, m.length) < 0) {
                            if (System.currentTimeMillis() > later) throw new IllegalStateException("extension stuck");
                            Thread.yield();
                        }
                    }
                    followed += readAndCheck(follow, half, count - half, later, errors, "following replay");
                }
                final long extended = ext.position();
                while (archive.getRecordingPosition(recordingId) != extended) {
                    if (System.currentTimeMillis() > later) throw new IllegalStateException("extension not recorded");
                    Thread.sleep(1);
                }
                archive.stopRecording(extensionSubscription);
                while ((extendedStop = archive.getStopPosition(recordingId)) == AeronArchive.NULL_POSITION) {
                    if (System.currentTimeMillis() > later) throw new IllegalStateException("extension not stopped");
                    Thread.sleep(1);
                }
                if (extendedStop != extended) errors.add("extended stop " + extendedStop + " != " + extended);
            }
            final StringBuilder out = new StringBuilder("{\"recording_id\": ").append(recordingId)
                .append(", \"archive_id\": ").append(archive.archiveId())
                .append(", \"stop_position\": ").append(stop)
                .append(", \"bounded\": ").append(bounded)
                .append(", \"followed\": ").append(followed)
                .append(", \"extended_stop\": ").append(extendedStop)
                .append(", \"descriptor\": ").append(descriptor.length() > 0 ? descriptor : "null")
                .append(", \"replayed\": ").append(replayed)
                .append(", \"errors\": ");
            System.out.println(out.append(jsonList(errors)).append("}"));
            return errors.isEmpty() ? 0 : 1;
        }
    }

    /**
     * Reads messages first, first + 1, ... (n of them) from {@code sub}, checking each; returns how
     * many came before the deadline (epoch ms).
     */
    static long readAndCheck(final Subscription sub, final int first, final int n, final long deadline,
        final List<String> errors, final String what) {
        final long[] got = {0};
        final FragmentHandler handler = new FragmentAssembler((buffer, offset, length, header) -> {
            final byte[] want = message(first + (int)got[0]);
            final byte[] bytes = new byte[length];
            buffer.getBytes(offset, bytes);
            if (!Arrays.equals(want, bytes) && errors.size() < 10) {
                errors.add(what + ": message " + (first + got[0]) + " differs");
            }
            got[0]++;
        });
        while (got[0] < n) {
            if (System.currentTimeMillis() > deadline) {
                errors.add(what + " stuck at " + (first + got[0]));
                break;
            }
            if (sub.poll(handler, 100) == 0) Thread.yield();
        }
        return got[0];
    }

    static String jsonList(final List<String> items) {
        final StringBuilder b = new StringBuilder("[");
        for (int k = 0; k < items.size(); k++) b.append(k > 0 ? ", " : "").append(quote(items.get(k)));
        return b.append("]").toString();
    }

    /** A descriptor consumer that writes each descriptor into {@code into} as a JSON object. */
    static RecordingDescriptorConsumer describer(final StringBuilder into) {
        return (controlSessionId, correlationId, rid, startTimestamp, stopTimestamp, startPosition, stopPosition,
            initialTermId, segmentFileLength, termBufferLength, mtuLength, sessionId, streamId, strippedChannel,
            originalChannel, sourceIdentity) ->
            into.append("{\"recording_id\": ").append(rid)
                .append(", \"start_position\": ").append(startPosition)
                .append(", \"stop_position\": ").append(stopPosition)
                .append(", \"initial_term_id\": ").append(initialTermId)
                .append(", \"term_buffer_length\": ").append(termBufferLength)
                .append(", \"mtu_length\": ").append(mtuLength)
                .append(", \"stream_id\": ").append(streamId)
                .append(", \"session_id\": ").append(sessionId)
                .append(", \"stripped_channel\": ").append(quote(strippedChannel))
                .append(", \"original_channel\": ").append(quote(originalChannel))
                .append(", \"source_identity\": ").append(quote(sourceIdentity)).append("}");
    }

    /**
     * Replays {@code length} bytes of a recording from {@code position} on replay_channel/replay_stream
     * and checks that messages 0, 1, ... of the stream come back, until {@code count} did or the
     * deadline (epoch ms) passed; returns how many came (mismatches go to {@code errors}).
     */
    static long replayAndCheck(final AeronArchive archive, final long recordingId, final long position,
        final long length, final int count, final long deadline, final List<String> errors) {
        final long[] replayed = {0};
        try (Subscription replay = archive.replay(recordingId, position, length, arg("replay_channel"),
            Integer.parseInt(arg("replay_stream")))) {
            final FragmentHandler handler = new FragmentAssembler((buffer, offset, n, header) -> {
                final byte[] want = message((int)replayed[0]);
                final byte[] got = new byte[n];
                buffer.getBytes(offset, got);
                if (!Arrays.equals(want, got) && errors.size() < 10) {
                    errors.add("replayed message " + replayed[0] + " differs");
                }
                replayed[0]++;
            });
            while (replayed[0] < count) {
                if (System.currentTimeMillis() > deadline) {
                    errors.add("replay stuck at " + replayed[0]);
                    break;
                }
                if (replay.poll(handler, 100) == 0) Thread.yield();
            }
        }
        return replayed[0];
    }

    static int replicate() throws Exception {
        final int count = Integer.parseInt(arg("count"));
        final long srcRecordingId = Long.parseLong(arg("src_recording"));
        final long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(arg("timeout_s", "60"));
        final List<String> errors = Collections.synchronizedList(new ArrayList<>());
        // Every signal of this control session (one may come before replicate() returns its id).
        final List<Object[]> signals = new ArrayList<>();
        final RecordingSignalConsumer onSignal = (controlSessionId, correlationId, recordingId, subscriptionId,
            position, signal) -> signals.add(new Object[] {signal, correlationId, recordingId, subscriptionId, position});
        final AeronArchive.Context ctx = new AeronArchive.Context()
            .controlRequestChannel(arg("control"))
            .controlRequestStreamId(10)
            .controlResponseChannel(arg("response"))
            .controlResponseStreamId(20)
            .recordingSignalConsumer(onSignal)
            .errorHandler(e -> errors.add("archive error: " + e.getMessage()));
        try (AeronArchive archive = AeronArchive.connect(ctx)) {
            final ReplicationParams params = new ReplicationParams()
                .dstRecordingId(Long.parseLong(arg("dst_recording", "-1")))
                .stopPosition(Long.parseLong(arg("stop", "-1")));
            if (ARGS.containsKey("replication_channel")) params.replicationChannel(arg("replication_channel"));
            if (ARGS.containsKey("session_id")) params.replicationSessionId(Integer.parseInt(arg("session_id")));
            if (ARGS.containsKey("src_response")) params.srcResponseChannel(arg("src_response"));
            if (ARGS.containsKey("file_io_max")) params.fileIoMaxLength(Integer.parseInt(arg("file_io_max")));
            if (ARGS.containsKey("live_destination")) params.liveDestination(arg("live_destination"));
            if (ARGS.containsKey("channel_tag")) params.channelTagId(Long.parseLong(arg("channel_tag")));
            if (ARGS.containsKey("subscription_tag")) params.subscriptionTagId(Long.parseLong(arg("subscription_tag")));
            final long replicationId = archive.replicate(srcRecordingId, Integer.parseInt(arg("src_stream", "10")),
                arg("src_control"), params);
            long dstRecordingId = Long.parseLong(arg("dst_recording", "-1"));
            final long stopAfterMs = Long.parseLong(arg("stop_after_ms", "-1"));
            long stopAt = Long.MAX_VALUE;
            for (int seen = 0; ; ) {
                boolean ended = false;
                for (; seen < signals.size(); seen++) {
                    final Object[] sig = signals.get(seen);
                    if ((long)sig[1] != replicationId) continue;
                    if (sig[0] == RecordingSignal.REPLICATE) dstRecordingId = (long)sig[2];
                    if (sig[0] == RecordingSignal.EXTEND && stopAfterMs >= 0) {
                        stopAt = System.currentTimeMillis() + stopAfterMs;
                    }
                    ended |= sig[0] == RecordingSignal.REPLICATE_END;
                }
                if (ended) break;
                if (System.currentTimeMillis() >= stopAt) {
                    archive.stopReplication(replicationId);
                    stopAt = Long.MAX_VALUE;
                }
                if (System.currentTimeMillis() > deadline) {
                    errors.add("no REPLICATE_END within the time-out");
                    break;
                }
                if (archive.pollForRecordingSignals() == 0) Thread.sleep(1);
            }
            final StringBuilder descriptor = new StringBuilder();
            long replayed = 0;
            if (dstRecordingId != Aeron.NULL_VALUE) {
                if (archive.listRecording(dstRecordingId, describer(descriptor)) != 1) errors.add("listed != 1");
                try {
                    if (count > 0) {
                        replayed = replayAndCheck(archive, dstRecordingId, AeronArchive.NULL_POSITION,
                            AeronArchive.NULL_LENGTH, count, deadline + 20_000, errors);
                    }
                } catch (final ArchiveException e) {
                    errors.add("replaying the copy: " + e.getMessage());
                }
            }
            final List<String> signalsJson = new ArrayList<>();
            for (final Object[] sig : signals) {
                signalsJson.add("{\"signal\": " + quote(sig[0].toString()) + ", \"correlation_id\": " + sig[1]
                    + ", \"recording_id\": " + sig[2] + ", \"subscription_id\": " + sig[3]
                    + ", \"position\": " + sig[4] + "}");
            }
            final StringBuilder out = new StringBuilder("{\"replication_id\": ").append(replicationId)
                .append(", \"signals\": [").append(String.join(", ", signalsJson)).append("]")
                .append(", \"descriptor\": ").append(descriptor.length() > 0 ? descriptor : "null")
                .append(", \"replayed\": ").append(replayed)
                .append(", \"errors\": ").append(jsonList(errors));
            System.out.println(out.append("}"));
            return errors.isEmpty() ? 0 : 1;
        }
    }

    static int publish() throws Exception {
        final int stream = Integer.parseInt(arg("stream"));
        final java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        try (Aeron aeron = Aeron.connect(new Aeron.Context());
            ExclusivePublication publication = aeron.addExclusivePublication(arg("channel"), stream)) {
            for (final String destination : arg("destinations", "").split(",")) {
                if (!destination.isEmpty()) publication.addDestination(destination);
            }
            System.out.println("{\"session_id\": " + publication.sessionId()
                + ", \"initial_term_id\": " + publication.initialTermId() + "}");
            int next = 0;
            String line;
            while ((line = in.readLine()) != null && !"close".equals(line.trim())) {
                final String[] words = line.trim().split("\\s+");
                if (!"publish".equals(words[0])) {
                    System.out.println("{\"error\": " + quote("unknown command " + line) + "}");
                    continue;
                }
                final long deadline = System.currentTimeMillis() + 30_000;
                for (final int end = next + Integer.parseInt(words[1]); next < end; next++) {
                    final byte[] m = message(next);
                    final UnsafeBuffer b = new UnsafeBuffer(m);
                    long result;
                    while ((result = publication.offer(b, 0, m.length)) < 0) {
                        if (result == Publication.CLOSED || System.currentTimeMillis() > deadline) {
                            System.out.println("{\"error\": \"offer stuck at " + next + ": " + result + "\"}");
                            return 1;
                        }
                        Thread.yield();
                    }
                }
                System.out.println("{\"position\": " + publication.position() + "}");
            }
        }
        return 0;
    }
}
