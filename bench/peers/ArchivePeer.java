/*
 * The Aeron Java archive client of sulis' interoperability tests (tests/interop/test_archive_interop.py):
 * Aeron's own AeronArchive, driving an archive (sulis's) through the driver in aeron.dir.
 * Compiled by bench/peers/aeron.py against the current aeron-all jar only: Aeron 1.15.1's archive
 * speaks the pre-1.16 protocol (schema id 1), which sulis does not (docs/archive.md).
 *
 *   client control=URI response=URI channel=URI stream=N count=N replay_channel=URI replay_stream=N
 *
 * Starts a recording of channel/stream, publishes count messages of tests/interop/stream.py's kind
 * (index, then bytes (i + j) & 0xff, lengths 8 + (i * 37) % 400, every 97th 5000 bytes), finds the
 * recording by its rec-pos counter (RecordingPos, as Aeron users do), waits until it is recorded,
 * stops it, lists it, replays it and checks every message; then extends nothing and exits. One JSON
 * line: {"recording_id", "archive_id", "stop_position", "descriptor": {...}, "replayed", "errors"}.
 */

import io.aeron.*;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.client.RecordingDescriptorConsumer;
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
        if (args.length == 0 || !"client".equals(args[0])) {
            System.err.println("ArchivePeer: usage: client key=value ...");
            System.exit(2);
        }
        System.exit(client());
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
            for (int i = 0; i < count; i++) {
                final byte[] m = message(i);
                final UnsafeBuffer b = new UnsafeBuffer(m);
                while (publication.offer(b, 0, m.length) < 0) {
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
            final RecordingDescriptorConsumer consumer = (controlSessionId, correlationId, rid, startTimestamp,
                stopTimestamp, startPosition, stopPosition, initialTermId, segmentFileLength, termBufferLength,
                mtuLength, sessionId, streamId, strippedChannel, originalChannel, sourceIdentity) ->
                descriptor.append("{\"recording_id\": ").append(rid)
                    .append(", \"start_position\": ").append(startPosition)
                    .append(", \"stop_position\": ").append(stopPosition)
                    .append(", \"stream_id\": ").append(streamId)
                    .append(", \"session_id\": ").append(sessionId)
                    .append(", \"stripped_channel\": ").append(quote(strippedChannel))
                    .append(", \"original_channel\": ").append(quote(originalChannel))
                    .append(", \"source_identity\": ").append(quote(sourceIdentity)).append("}");
            if (archive.listRecordingsForUri(0, 10, channel, stream, consumer) != 1) errors.add("listed != 1");
            final long[] replayed = {0};
            try (Subscription replay = archive.replay(recordingId, 0, end, arg("replay_channel"),
                Integer.parseInt(arg("replay_stream")))) {
                final FragmentHandler handler = new FragmentAssembler((buffer, offset, length, header) -> {
                    final byte[] want = message((int)replayed[0]);
                    final byte[] got = new byte[length];
                    buffer.getBytes(offset, got);
                    if (!Arrays.equals(want, got) && errors.size() < 10) {
                        errors.add("replayed message " + replayed[0] + " differs");
                    }
                    replayed[0]++;
                });
                while (replayed[0] < count) {
                    if (System.currentTimeMillis() > deadline + 20_000) {
                        errors.add("replay stuck at " + replayed[0]);
                        break;
                    }
                    if (replay.poll(handler, 100) == 0) Thread.yield();
                }
            }
            final StringBuilder out = new StringBuilder("{\"recording_id\": ").append(recordingId)
                .append(", \"archive_id\": ").append(archive.archiveId())
                .append(", \"stop_position\": ").append(stop)
                .append(", \"descriptor\": ").append(descriptor.length() > 0 ? descriptor : "null")
                .append(", \"replayed\": ").append(replayed[0])
                .append(", \"errors\": [");
            for (int k = 0; k < errors.size(); k++) out.append(k > 0 ? ", " : "").append(quote(errors.get(k)));
            System.out.println(out.append("]}"));
            return errors.isEmpty() ? 0 : 1;
        }
    }
}
