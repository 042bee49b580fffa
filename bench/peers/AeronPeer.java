/*
 * The Aeron Java peer of sulis' benchmarks and interoperability tests: one program, one role per
 * process. bench/peers/aeron.py compiles it against each aeron-all jar (javac --release 11), so one
 * source serves Aeron 1.15.1 and current releases. Arguments: ROLE key=value ...
 *
 * Benchmark roles, the twins of the Rust ones in crates/sulis-bench (bench/README.md, "How the
 * harness is built"):
 *   pub  channel= stream= length=N|mixed (total=N | stop=FILE) idle=spin|yield [driver=1]
 *     (mixed: message i is mixedLength(i) bytes, the sequence of sulis-bench's mixed_length;
 *     subscribers count whole messages, fragments with the END flag)
 *   sub  channel= stream= [limit=10] (duration=S | total=N warmup=W) idle= [driver=1] [length=mixed]
 *   ping ping_channel= pong_channel= ping_stream= pong_stream= n= warmup= length= idle= [driver=1]
 *   pong ping_channel= pong_channel= ping_stream= pong_stream= total= idle= [driver=1]
 * Each speaks the JSON lines of every role (bench/README.md): {"ready": true}, then its results
 * ({"interval_s", "messages"} per second and {"done"}; {"done", "received", "ns"} when counted from
 * message warmup+1; {"sent"}; {"rtt_ns": [...]}; {"echoed"}), and keeps its streams and driver up
 * until its stdin closes. driver=1 launches an embedded driver set up by the aeron.* properties,
 * else the client uses the one in aeron.dir; idle=yield calls Thread.yield() when a client could
 * not progress, spin Thread.onSpinWait().
 *
 * Interop roles: the message stream of tests/interop/stream.py (the constants below repeat its
 * definition), published or checked through the driver in aeron.dir; one JSON line at the end
 * ({"role", "impl", "count", "bytes", "checksum", "errors", "error_count", "seconds", ...}), exit
 * status 0 when everything was sent / received in order and intact:
 *   stream-pub channel= stream= count= [timeout=60] [linger=5] [exclusive=1] [destinations=CH,CH]
 *     (destinations: added to a control-mode=manual publication before it waits to connect)
 *   stream-sub channel= stream= count= [timeout=120] [settle=0.5] [destinations=CH,CH]
 *   session-ids stream=  Aeron.nextSessionId(stream) twice (Aeron 1.49 and later), then the session id
 *     of an exclusive IPC publication on the stream: {"role", "next": [a, b], "publication"}
 */

import io.aeron.*;
import io.aeron.driver.MediaDriver;
import io.aeron.logbuffer.FragmentHandler;
import io.aeron.logbuffer.Header;
import org.agrona.BufferUtil;
import org.agrona.CloseHelper;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.*;

import java.io.File;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.*;
import java.util.zip.CRC32;

public final class AeronPeer {
    static final Map<String, String> ARGS = new HashMap<>();
    static long received;
    static boolean yielding;
    static ExclusivePublication echoPublication;

    public static void main(final String[] args) throws Exception {
        final String role = args.length > 0 ? args[0] : usage("no role");
        for (int k = 1; k < args.length; k++) {
            final int eq = args[k].indexOf('=');
            ARGS.put(eq > 0 ? args[k].substring(0, eq) : usage("expected key=value, not " + args[k]),
                args[k].substring(eq + 1));
        }
        if (role.startsWith("stream-")) {
            System.exit(new Stream(role.substring("stream-".length())).run());
        }
        yielding = "yield".equals(arg("idle", "spin"));
        final MediaDriver driver = "1".equals(arg("driver", "0")) ? MediaDriver.launchEmbedded() : null;
        final Aeron.Context context = new Aeron.Context();
        if (driver != null) {
            context.aeronDirectoryName(driver.aeronDirectoryName());
        }
        try (Aeron aeron = Aeron.connect(context)) {
            switch (role) {
                case "pub": publish(aeron); break;
                case "sub": subscribe(aeron); break;
                case "ping": ping(aeron); break;
                case "pong": pong(aeron); break;
                case "session-ids": sessionIds(aeron); break;
                default: usage("unknown role " + role);
            }
        } finally {
            CloseHelper.close(driver);
        }
    }

    static String usage(final String why) {
        System.err.println("AeronPeer: " + why + " (usage: see the top of AeronPeer.java)");
        System.exit(2);
        return null;
    }

    static String arg(final String key, final String fallback) {
        final String value = ARGS.getOrDefault(key, fallback);
        return value != null ? value : usage("missing " + key + "=");
    }

    static long num(final String key, final String fallback) {
        return Long.parseLong(arg(key, fallback));
    }

    static void idle() {
        if (yielding) Thread.yield(); else Thread.onSpinWait();
    }

    /** Keeps the streams and the driver up until the orchestrator closes our stdin (the cue to go). */
    static void hold() throws Exception {
        while (System.in.read() >= 0) continue;
    }

    static UnsafeBuffer payload(final int length) {
        final UnsafeBuffer buffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(length, 64));
        buffer.setMemory(0, length, (byte)0x5a);
        return buffer;
    }

    /** The session-ids role. nextSessionId is found by reflection: the source also compiles against 1.15.1. */
    static void sessionIds(final Aeron aeron) throws Exception {
        final int streamId = (int)num("stream", null);
        final java.lang.reflect.Method next = Aeron.class.getMethod("nextSessionId", int.class);
        final int a = (int)next.invoke(aeron, streamId);
        final int b = (int)next.invoke(aeron, streamId);
        try (ExclusivePublication p = aeron.addExclusivePublication("aeron:ipc", streamId)) {
            System.out.println("{\"role\": \"session-ids\", \"next\": [" + a + ", " + b + "], \"publication\": " +
                p.sessionId() + "}");
        }
    }

    // ------------------------------------------------------------------ benchmark roles

    /** Length of message i of a length=mixed stream: 1 % of 4 KiB to 256 KiB, the rest 8 to 1,376 B. */
    static int mixedLength(final long i) {
        return i % 100 == 99 ? 4096 << (int)((i / 100) % 7) : (int)(8 + Long.remainderUnsigned(i * 2_654_435_761L, 1369));
    }

    static void publish(final Aeron aeron) throws Exception {
        final boolean mixed = "mixed".equals(arg("length", "32"));
        final int length = mixed ? 256 * 1024 : (int)num("length", "32");
        final long total = num("total", "0");
        final String stop = arg("stop", "");
        final File stopFile = new File(stop);
        final UnsafeBuffer buffer = payload(length);
        try (ExclusivePublication publication = aeron.addExclusivePublication(arg("channel", null),
            (int)num("stream", "1001"))) {
            System.out.println("{\"ready\": true}");
            while (!publication.isConnected()) Thread.sleep(1);
            long sent = 0;
            long refused = 0;
            int n = 0;
            final long start = System.nanoTime();
            long bytes = 0;
            while (total == 0 || sent < total) {
                final int messageLength = mixed ? mixedLength(sent) : length;
                if (publication.offer(buffer, 0, messageLength) < 0) {
                    refused++;
                    idle();
                } else {
                    sent++;
                    bytes += messageLength;
                }
                if ((++n & 0xFFFF) == 0 && !stop.isEmpty() && stopFile.exists()) {
                    break;
                }
            }
            System.out.println("{\"sent\": " + sent + ", \"refused\": " + refused + ", \"bytes\": " + bytes +
                ", \"ns\": " + (System.nanoTime() - start) + "}");
            hold();
        }
    }

    static void subscribe(final Aeron aeron) throws Exception {
        final int limit = (int)num("limit", "10");
        // Whole messages: a fragmented one counts at its last fragment. A mixed stream's are
        // checked: message i must be mixedLength(i) bytes.
        final boolean mixed = "mixed".equals(arg("length", "32"));
        final long[] partial = new long[1];
        final FragmentHandler handler = (buffer, offset, length, header) -> {
            if ((header.flags() & 0x40) != 0) {
                final long whole = partial[0] + length;
                partial[0] = 0;
                if (mixed && whole != mixedLength(received)) {
                    System.out.println("{\"error\": \"message " + received + " is " + whole + " bytes, not " +
                        mixedLength(received) + "\"}");
                    System.exit(2);
                }
                received++;
            } else {
                partial[0] += length;
            }
        };
        try (Subscription subscription = aeron.addSubscription(arg("channel", null), (int)num("stream", "1001"))) {
            System.out.println("{\"ready\": true}");
            final long giveUp = System.nanoTime() + 30_000_000_000L;
            while (received == 0) {
                if (subscription.poll(handler, limit) == 0) {
                    idle();
                    if (System.nanoTime() > giveUp) {
                        System.out.println("{\"error\": \"no message in 30 s\"}");
                        System.exit(1);
                    }
                }
            }
            if (ARGS.containsKey("duration")) {
                final long start = System.nanoTime();
                final long end = start + (long)(Double.parseDouble(arg("duration", null)) * 1e9);
                long intervalStart = start;
                long next = start + 1_000_000_000L;
                long last = received;
                int polls = 0;
                while (true) {
                    if (subscription.poll(handler, limit) == 0) idle();
                    if ((++polls & 63) == 0) {
                        final long now = System.nanoTime();
                        if (now >= next) {
                            System.out.println(String.format(Locale.ROOT, "{\"interval_s\": %.9f, \"messages\": %d}",
                                (now - intervalStart) / 1e9, received - last));
                            last = received;
                            intervalStart = now;
                            next += 1_000_000_000L;
                            if (now >= end) {
                                break;
                            }
                        }
                    }
                }
                System.out.println("{\"done\": true, \"received\": " + received + "}");
            } else {
                final long total = num("total", null);
                final long warmup = num("warmup", "0");
                while (received <= warmup) {
                    if (subscription.poll(handler, limit) == 0) idle();
                }
                final long start = System.nanoTime();
                final long first = received;
                while (received < total) {
                    if (subscription.poll(handler, limit) == 0) idle();
                }
                final long elapsed = System.nanoTime() - start;
                System.out.println("{\"done\": true, \"received\": " + (received - first + 1) + ", \"ns\": " + elapsed + "}");
            }
            hold();
        }
    }

    static void ping(final Aeron aeron) throws Exception {
        final int length = (int)num("length", "32");
        final int count = (int)num("n", null);
        final int warmup = (int)num("warmup", "0");
        final UnsafeBuffer buffer = payload(length);
        final FragmentHandler handler = (b, offset, len, header) -> received++;
        final long[] rtt = new long[count];
        try (ExclusivePublication publication = aeron.addExclusivePublication(arg("ping_channel", null),
            (int)num("ping_stream", "1002"));
            Subscription subscription = aeron.addSubscription(arg("pong_channel", null),
                (int)num("pong_stream", "1003"))) {
            System.out.println("{\"ready\": true}");
            while (!publication.isConnected() || subscription.imageCount() == 0) Thread.sleep(1);
            for (int i = 0; i < warmup + count; i++) {
                final long before = received;
                final long t0 = System.nanoTime();
                while (publication.offer(buffer, 0, length) < 0) idle();
                while (received == before) {
                    if (subscription.poll(handler, 1) == 0) idle();
                }
                final long t1 = System.nanoTime();
                if (i >= warmup) {
                    rtt[i - warmup] = t1 - t0;
                }
            }
            final StringBuilder sb = new StringBuilder(count * 7 + 16).append("{\"rtt_ns\": [");
            for (int k = 0; k < count; k++) {
                sb.append(k == 0 ? "" : ",").append(rtt[k]);
            }
            System.out.println(sb.append("]}").toString());
            hold();
        }
    }

    static void echo(final DirectBuffer buffer, final int offset, final int length) {
        while (echoPublication.offer(buffer, offset, length) < 0) idle();
        received++;
    }

    static void pong(final Aeron aeron) throws Exception {
        final long total = num("total", null);
        try (Subscription subscription = aeron.addSubscription(arg("ping_channel", null),
            (int)num("ping_stream", "1002"));
            ExclusivePublication publication = aeron.addExclusivePublication(arg("pong_channel", null),
                (int)num("pong_stream", "1003"))) {
            echoPublication = publication;
            final FragmentHandler handler = (buffer, offset, length, header) -> echo(buffer, offset, length);
            System.out.println("{\"ready\": true}");
            while (received < total) {
                if (subscription.poll(handler, 1) == 0) idle();
            }
            System.out.println("{\"echoed\": " + received + "}");
            hold();
        }
    }

    // ------------------------------------------------------------------ interop roles

    /** The interop stream (twin of tests/interop/stream.py) and its publisher and checker. */
    static final class Stream implements FragmentHandler {
        static final int[] CYCLE = {8, 32, 100, 1000, 1376, 1377, 4000, 9, 64, 1408, 256, 2752, 33};
        static final long BIG_EVERY = 50_000, BIG_PHASE = 1_000;
        static final int BIG_LENGTH = (1 << 20) + 4099;
        static final int OFFSET_MODULUS = 251, INDEX_LENGTH = 8;
        static final byte[] SEED = "sulis-interop-stream-v1".getBytes(StandardCharsets.US_ASCII);
        static final byte[] PATTERN = pattern(OFFSET_MODULUS - 1 + BIG_LENGTH - INDEX_LENGTH);

        /** SHA-256 in counter mode: SHA256(SEED + k as 4 little-endian bytes) for k = 0, 1, ... */
        static byte[] pattern(final int length) {
            try {
                final MessageDigest sha = MessageDigest.getInstance("SHA-256");
                final byte[] out = new byte[(length + 31) / 32 * 32];
                for (int k = 0; k * 32 < out.length; k++) {
                    sha.update(SEED);
                    sha.update(new byte[] {(byte)k, (byte)(k >>> 8), (byte)(k >>> 16), (byte)(k >>> 24)});
                    System.arraycopy(sha.digest(), 0, out, k * 32, 32);
                }
                return out;
            } catch (final Exception ex) {
                throw new IllegalStateException(ex);
            }
        }

        static int length(final long i) {
            return i % BIG_EVERY == BIG_PHASE ? BIG_LENGTH : CYCLE[(int)(i % CYCLE.length)];
        }

        final String mode;
        final long count = num("count", null);
        final double timeoutS;
        final List<String> errors = new ArrayList<>();
        final CRC32 crc = new CRC32();
        final byte[] scratch = new byte[BIG_LENGTH];
        long errorCount, expected, done, bytes, firstNs, lastNs, lastIndex = -1;

        Stream(final String mode) {
            this.mode = mode;
            this.timeoutS = Double.parseDouble(arg("timeout", mode.equals("sub") ? "120" : "60"));
        }

        synchronized void error(final String text) {
            errorCount++;
            if (errors.size() < 10) {
                errors.add(text);
            }
            System.err.println("AeronPeer " + mode + ": " + text);
        }

        void report(final double seconds, final String extra) {
            final StringBuilder b = new StringBuilder(256).append("{\"role\": \"").append(mode);
            final Package p = Aeron.class.getPackage();
            final String version = p == null ? null : p.getImplementationVersion();
            b.append("\", \"impl\": \"aeron-java ").append(version == null ? "?" : version);
            b.append("\", \"count\": ").append(done).append(", \"bytes\": ").append(bytes);
            b.append(", \"checksum\": ").append(crc.getValue()).append(", \"errors\": [");
            for (int k = 0; k < errors.size(); k++) {
                b.append(k == 0 ? "\"" : ", \"").append(errors.get(k).replace("\\", "\\\\").replace("\"", "\\\""))
                    .append('"');
            }
            b.append("], \"error_count\": ").append(errorCount);
            b.append(String.format(Locale.ROOT, ", \"seconds\": %.3f", seconds)).append(extra).append('}');
            System.out.println(b.toString());
        }

        int run() {
            final Aeron.Context context = new Aeron.Context(); // aeron.dir from -Daeron.dir
            context.errorHandler((throwable) -> error("client error: " + throwable));
            try (Aeron aeron = Aeron.connect(context)) {
                return mode.equals("pub") ? publish(aeron) : subscribe(aeron);
            } catch (final Exception ex) {
                error("exception: " + ex);
                report(0, "");
                return 1;
            }
        }

        int publish(final Aeron aeron) throws Exception {
            final String channel = arg("channel", null);
            final int streamId = (int)num("stream", null);
            final Publication pub = "1".equals(arg("exclusive", "0")) ?
                aeron.addExclusivePublication(channel, streamId) : aeron.addPublication(channel, streamId);
            for (final String destination : arg("destinations", "").split(",")) {
                if (!destination.isEmpty()) {
                    pub.addDestination(destination);
                }
            }
            final int longest = count > BIG_PHASE ? BIG_LENGTH : 4000;
            if (longest > pub.maxMessageLength()) {
                error("max message length " + pub.maxMessageLength() + " < " + longest + " (term length too small)");
            }
            final IdleStrategy idle = new BackoffIdleStrategy(10, 10, 1_000, 1_000_000);
            final long connectDeadline = System.nanoTime() + (long)(timeoutS * 1e9);
            while (!pub.isConnected() && errors.isEmpty()) {
                if (System.nanoTime() > connectDeadline) {
                    error("not connected within " + timeoutS + " s");
                }
                idle.idle(0);
            }
            final UnsafeBuffer buffer = new UnsafeBuffer(scratch);
            final long start = System.nanoTime();
            long position = 0;
            long lastProgress = start;
            for (long i = 0; i < count && errors.isEmpty(); i++) {
                final int len = length(i);
                buffer.putLong(0, i, ByteOrder.LITTLE_ENDIAN);
                System.arraycopy(PATTERN, (int)(i % OFFSET_MODULUS), scratch, INDEX_LENGTH, len - INDEX_LENGTH);
                idle.reset();
                long result;
                while ((result = pub.offer(buffer, 0, len)) < 0) {
                    if (result == Publication.CLOSED || result == Publication.MAX_POSITION_EXCEEDED) {
                        error("offer of message " + i + " failed: " + result);
                        break;
                    }
                    if (System.nanoTime() - lastProgress > (long)(timeoutS * 1e9)) {
                        error("no progress for " + timeoutS + " s at message " + i + " (last offer result " +
                            (result == Publication.NOT_CONNECTED ? "NOT_CONNECTED" : "BACK_PRESSURED") + ")");
                        break;
                    }
                    idle.idle(0);
                }
                if (result >= 0) {
                    position = result;
                    lastProgress = System.nanoTime();
                    crc.update(scratch, 0, len);
                    done++;
                    bytes += len;
                }
            }
            report((System.nanoTime() - start) / 1e9, ", \"position\": " + position);
            // The tail goes out while the subscriber is still there (a closed publication is drained too).
            final long lingerDeadline = System.nanoTime() + (long)(Double.parseDouble(arg("linger", "5")) * 1e9);
            while (pub.isConnected() && System.nanoTime() < lingerDeadline) {
                Thread.sleep(10);
            }
            pub.close();
            return errorCount == 0 && done == count ? 0 : 1;
        }

        public void onFragment(final DirectBuffer buffer, final int offset, final int length, final Header header) {
            if (done == 0) {
                firstNs = System.nanoTime();
            }
            done++;
            bytes += length;
            if (length > scratch.length || length < INDEX_LENGTH) {
                error("message #" + (done - 1) + " is " + length + " bytes long");
                expected++;
                return;
            }
            buffer.getBytes(offset, scratch, 0, length);
            crc.update(scratch, 0, length);
            if (done == count) {
                lastNs = System.nanoTime();
            }
            final long index = buffer.getLong(offset, ByteOrder.LITTLE_ENDIAN);
            if (index != expected) {
                error("message #" + (done - 1) + ": index " + index + ", expected " + expected +
                    (index < expected ? " (duplicate or reordered)" : " (gap)"));
            }
            if (index < 0 || index >= count) {
                error("message #" + (done - 1) + ": index " + index + " is outside the stream of " + count);
                expected = index + 1;
                return;
            }
            lastIndex = index;
            expected = index + 1;
            final int want = length(index);
            final int from = (int)(index % OFFSET_MODULUS);
            if (length != want) {
                error("message " + index + ": length " + length + ", expected " + want);
            } else if (Arrays.mismatch(scratch, INDEX_LENGTH, length, PATTERN, from, from + length - INDEX_LENGTH) >= 0) {
                error("message " + index + ": content differs");
            }
        }

        int subscribe(final Aeron aeron) {
            final int[] images = new int[2];
            final Subscription sub = aeron.addSubscription(arg("channel", null), (int)num("stream", null),
                (image) -> images[0]++, (image) -> images[1]++);
            for (final String destination : arg("destinations", "").split(",")) {
                if (!destination.isEmpty()) {
                    sub.addDestination(destination);
                }
            }
            final FragmentAssembler assembler = new FragmentAssembler(this);
            final IdleStrategy idle = new BackoffIdleStrategy(10, 10, 1_000, 1_000_000);
            final long deadline = System.nanoTime() + (long)(timeoutS * 1e9);
            boolean timedOut = false;
            while (done < count) {
                final int n = sub.poll(assembler, 256);
                if (n == 0 && System.nanoTime() > deadline) {
                    timedOut = true;
                    error("timed out after " + timeoutS + " s with " + done + " of " + count + " messages (" +
                        sub.imageCount() + " images)");
                    break;
                }
                idle.idle(n);
            }
            if (!timedOut) {
                final long settleDeadline = System.nanoTime() + (long)(Double.parseDouble(arg("settle", "0.5")) * 1e9);
                final long before = done;
                while (System.nanoTime() < settleDeadline) {
                    idle.idle(sub.poll(assembler, 256));
                }
                if (done > before) {
                    error((done - before) + " messages arrived after the last expected one");
                }
            }
            sub.close();
            final double seconds = done == 0 ? 0 : ((lastNs != 0 ? lastNs : System.nanoTime()) - firstNs) / 1e9;
            report(seconds, ", \"last_index\": " + lastIndex + ", \"images\": " + images[0] +
                ", \"unavailable_images\": " + images[1] + ", \"timed_out\": " + timedOut);
            return errorCount == 0 && done == count ? 0 : 1;
        }
    }
}
