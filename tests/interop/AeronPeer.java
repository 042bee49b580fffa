/*
 * Interop peer on the Aeron Java client: publishes or checks the interop message
 * stream (see stream.py, whose definition the constants below repeat).
 *
 *   java -Daeron.dir=DIR -cp CLASSES:aeron-all.jar AeronPeer pub CHANNEL STREAM COUNT [options]
 *   java -Daeron.dir=DIR -cp CLASSES:aeron-all.jar AeronPeer sub CHANNEL STREAM COUNT [options]
 *
 * Options:
 *   --timeout S    sub: give up after S seconds (default 120);
 *                  pub: give up when not connected, or making no progress, for S seconds (default 60)
 *   --linger S     pub: after the last offer, stay up to S seconds while connected (default 5);
 *                  the media driver keeps draining a closed publication in any case
 *   --settle S     sub: after the last expected message, keep polling S seconds for extra ones (default 0.5)
 *   --exclusive    pub: use an exclusive publication
 *
 * Prints exactly one JSON line on stdout:
 *   {"role","impl","count","bytes","checksum","errors","error_count","seconds",...}
 * and diagnostics on stderr. Exit status 0 when everything was sent / received
 * in order and intact, 1 otherwise, 2 on bad usage.
 *
 * Uses only client API present in both Aeron 1.15.1 and 1.51.0; compile it
 * against the jar it will run with (javac --release 11 -cp aeron-all-X.jar).
 */

import io.aeron.Aeron;
import io.aeron.FragmentAssembler;
import io.aeron.Image;
import io.aeron.Publication;
import io.aeron.Subscription;
import io.aeron.logbuffer.FragmentHandler;
import io.aeron.logbuffer.Header;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32;

public final class AeronPeer
{
    // ------------------------------------------------------------------ the stream (twin of stream.py)

    static final int[] CYCLE = { 8, 32, 100, 1000, 1376, 1377, 4000, 9, 64, 1408, 256, 2752, 33 };
    static final long BIG_EVERY = 50_000;
    static final long BIG_PHASE = 1_000;
    static final int BIG_LENGTH = (1 << 20) + 4099;
    static final int OFFSET_MODULUS = 251;
    static final byte[] SEED = "sulis-interop-stream-v1".getBytes(StandardCharsets.US_ASCII);
    static final int INDEX_LENGTH = 8;
    static final int PATTERN_LENGTH = OFFSET_MODULUS - 1 + BIG_LENGTH - INDEX_LENGTH;
    static final byte[] PATTERN = makePattern();

    static byte[] makePattern()
    {
        try
        {
            final MessageDigest sha = MessageDigest.getInstance("SHA-256");
            final byte[] out = new byte[(PATTERN_LENGTH + 31) / 32 * 32];
            final byte[] counter = new byte[4];
            for (int k = 0, at = 0; at < out.length; k++, at += 32)
            {
                counter[0] = (byte)k;
                counter[1] = (byte)(k >>> 8);
                counter[2] = (byte)(k >>> 16);
                counter[3] = (byte)(k >>> 24);
                sha.reset();
                sha.update(SEED);
                sha.update(counter);
                System.arraycopy(sha.digest(), 0, out, at, 32);
            }
            return out;
        }
        catch (final Exception ex)
        {
            throw new IllegalStateException(ex);
        }
    }

    static int length(final long i)
    {
        return i % BIG_EVERY == BIG_PHASE ? BIG_LENGTH : CYCLE[(int)(i % CYCLE.length)];
    }

    static int patternOffset(final long i)
    {
        return (int)(i % OFFSET_MODULUS);
    }

    // ------------------------------------------------------------------ arguments

    String mode;
    String channel;
    int streamId;
    long count;
    double timeoutS = -1;
    double lingerS = 5.0;
    double settleS = 0.5;
    boolean exclusive;

    final List<String> errors = new ArrayList<>();
    long errorCount;

    synchronized void error(final String text)
    {
        errorCount++;
        if (errors.size() < 10)
        {
            errors.add(text);
        }
        System.err.println("AeronPeer " + mode + ": " + text);
    }

    static void usage(final String why)
    {
        System.err.println("AeronPeer: " + why);
        System.err.println("usage: AeronPeer pub|sub CHANNEL STREAM COUNT [--timeout S] [--linger S] [--settle S] [--exclusive]");
        System.exit(2);
    }

    void parse(final String[] args)
    {
        if (args.length < 4)
        {
            usage("expected at least 4 arguments");
        }
        mode = args[0];
        if (!mode.equals("pub") && !mode.equals("sub"))
        {
            usage("mode must be pub or sub, not " + mode);
        }
        channel = args[1];
        try
        {
            streamId = Integer.parseInt(args[2]);
            count = Long.parseLong(args[3].replace("_", ""));
            for (int k = 4; k < args.length; k++)
            {
                switch (args[k])
                {
                    case "--timeout": timeoutS = Double.parseDouble(args[++k]); break;
                    case "--linger": lingerS = Double.parseDouble(args[++k]); break;
                    case "--settle": settleS = Double.parseDouble(args[++k]); break;
                    case "--exclusive": exclusive = true; break;
                    default: usage("unknown option " + args[k]);
                }
            }
        }
        catch (final NumberFormatException | ArrayIndexOutOfBoundsException ex)
        {
            usage("bad argument: " + ex);
        }
        if (timeoutS < 0)
        {
            timeoutS = mode.equals("sub") ? 120.0 : 60.0;
        }
    }

    static long nanos(final double seconds)
    {
        return (long)(seconds * 1e9);
    }

    // ------------------------------------------------------------------ JSON

    static String quote(final String s)
    {
        final StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int k = 0; k < s.length(); k++)
        {
            final char c = s.charAt(k);
            switch (c)
            {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20)
                    {
                        b.append(String.format("\\u%04x", (int)c));
                    }
                    else
                    {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    void report(final long n, final long bytes, final long checksum, final double seconds, final String extra)
    {
        final StringBuilder b = new StringBuilder(256);
        b.append("{\"role\":").append(quote(mode));
        b.append(",\"impl\":").append(quote("aeron-java " + aeronVersion()));
        b.append(",\"count\":").append(n);
        b.append(",\"bytes\":").append(bytes);
        b.append(",\"checksum\":").append(checksum);
        b.append(",\"errors\":[");
        for (int k = 0; k < errors.size(); k++)
        {
            b.append(k == 0 ? "" : ",").append(quote(errors.get(k)));
        }
        b.append("],\"error_count\":").append(errorCount);
        b.append(",\"seconds\":").append(String.format(java.util.Locale.ROOT, "%.3f", seconds));
        b.append(extra).append('}');
        System.out.println(b);
        System.out.flush();
    }

    static String aeronVersion()
    {
        final Package p = Aeron.class.getPackage();
        final String v = p == null ? null : p.getImplementationVersion();
        return v == null ? "?" : v;
    }

    Aeron connect()
    {
        final Aeron.Context ctx = new Aeron.Context(); // aeron.dir comes from -Daeron.dir
        ctx.errorHandler((throwable) -> error("client error: " + throwable));
        return Aeron.connect(ctx);
    }

    // ------------------------------------------------------------------ pub

    int publish()
    {
        final CRC32 crc = new CRC32();
        long sent = 0;
        long bytes = 0;
        double seconds = 0;
        long position = 0;
        final IdleStrategy idle = new BackoffIdleStrategy(10, 10, 1_000, 1_000_000);
        try (Aeron aeron = connect())
        {
            final Publication pub = exclusive ?
                aeron.addExclusivePublication(channel, streamId) : aeron.addPublication(channel, streamId);
            final int longest = count > BIG_PHASE ? BIG_LENGTH : 4000;
            if (longest > pub.maxMessageLength())
            {
                error("max message length " + pub.maxMessageLength() + " < " + longest + " (term length too small)");
            }

            final long connectDeadline = System.nanoTime() + nanos(timeoutS);
            while (!pub.isConnected() && errors.isEmpty())
            {
                if (System.nanoTime() > connectDeadline)
                {
                    error("not connected within " + timeoutS + " s");
                    break;
                }
                idle.idle(0);
            }

            final byte[] array = new byte[BIG_LENGTH];
            final UnsafeBuffer buffer = new UnsafeBuffer(array);
            final long start = System.nanoTime();
            long lastProgress = start;
            boolean failed = !errors.isEmpty();
            for (long i = 0; i < count && !failed; i++)
            {
                final int len = length(i);
                buffer.putLong(0, i, ByteOrder.LITTLE_ENDIAN);
                System.arraycopy(PATTERN, patternOffset(i), array, INDEX_LENGTH, len - INDEX_LENGTH);
                idle.reset();
                while (true)
                {
                    final long result = pub.offer(buffer, 0, len);
                    if (result > 0)
                    {
                        position = result;
                        lastProgress = System.nanoTime();
                        break;
                    }
                    if (result == Publication.CLOSED || result == Publication.MAX_POSITION_EXCEEDED)
                    {
                        error("offer of message " + i + " failed: " +
                            (result == Publication.CLOSED ? "CLOSED" : "MAX_POSITION_EXCEEDED"));
                        failed = true;
                        break;
                    }
                    if (result != Publication.BACK_PRESSURED && result != Publication.ADMIN_ACTION &&
                        result != Publication.NOT_CONNECTED)
                    {
                        error("offer of message " + i + " returned " + result);
                        failed = true;
                        break;
                    }
                    if (System.nanoTime() - lastProgress > nanos(timeoutS))
                    {
                        error("no progress for " + timeoutS + " s at message " + i + " (last offer result " +
                            (result == Publication.NOT_CONNECTED ? "NOT_CONNECTED" : "BACK_PRESSURED") + ")");
                        failed = true;
                        break;
                    }
                    idle.idle(0);
                }
                if (!failed)
                {
                    crc.update(array, 0, len);
                    sent++;
                    bytes += len;
                }
            }
            seconds = (System.nanoTime() - start) / 1e9;
            report(sent, bytes, crc.getValue(), seconds, ",\"position\":" + position);

            // Let the tail go out while the subscriber is still there. Closing is safe
            // too: the driver drains a closed publication, then lingers for retransmits.
            final long lingerDeadline = System.nanoTime() + nanos(lingerS);
            while (pub.isConnected() && System.nanoTime() < lingerDeadline)
            {
                Thread.sleep(10);
            }
            pub.close();
        }
        catch (final Exception ex)
        {
            error("exception: " + ex);
            report(sent, bytes, crc.getValue(), seconds, ",\"position\":" + position);
        }
        return errorCount == 0 && sent == count ? 0 : 1;
    }

    // ------------------------------------------------------------------ sub

    final class Checker implements FragmentHandler
    {
        long expected;
        long received;
        long bytes;
        long lastIndex = -1;
        long firstNs;
        long lastNs;
        final CRC32 crc = new CRC32();
        final byte[] scratch = new byte[BIG_LENGTH];

        public void onFragment(final DirectBuffer buffer, final int offset, final int length, final Header header)
        {
            if (received == 0)
            {
                firstNs = System.nanoTime();
            }
            received++;
            bytes += length;
            if (length > scratch.length)
            {
                error("message #" + (received - 1) + " is " + length + " bytes long, longer than any in the stream");
                expected++;
                return;
            }
            buffer.getBytes(offset, scratch, 0, length);
            crc.update(scratch, 0, length);
            if (received == count)
            {
                lastNs = System.nanoTime();
            }
            if (length < INDEX_LENGTH)
            {
                error("message #" + (received - 1) + " (expected index " + expected + ") is only " + length + " bytes");
                expected++;
                return;
            }
            final long index = buffer.getLong(offset, ByteOrder.LITTLE_ENDIAN);
            if (index != expected)
            {
                error("message #" + (received - 1) + ": index " + index + ", expected " + expected +
                    (index < expected ? " (duplicate or reordered)" : " (gap)"));
            }
            if (index < 0 || index >= count)
            {
                error("message #" + (received - 1) + ": index " + index + " is outside the stream of " + count);
                expected = index + 1;
                return;
            }
            lastIndex = index;
            expected = index + 1;
            final int want = length(index);
            if (length != want)
            {
                error("message " + index + ": length " + length + ", expected " + want);
                return;
            }
            final int from = patternOffset(index);
            final int differs = Arrays.mismatch(
                scratch, INDEX_LENGTH, length, PATTERN, from, from + length - INDEX_LENGTH);
            if (differs >= 0)
            {
                error("message " + index + ": content differs at byte " + (INDEX_LENGTH + differs) + " of " + length);
            }
        }
    }

    int subscribe()
    {
        final Checker checker = new Checker();
        final AtomicInteger available = new AtomicInteger();
        final AtomicInteger unavailable = new AtomicInteger();
        boolean timedOut = false;
        final IdleStrategy idle = new BackoffIdleStrategy(10, 10, 1_000, 1_000_000);
        try (Aeron aeron = connect())
        {
            final Subscription sub = aeron.addSubscription(channel, streamId,
                (image) ->
                {
                    available.incrementAndGet();
                    System.err.println("AeronPeer sub: image available session=" + image.sessionId() +
                        " source=" + image.sourceIdentity() + " join=" + image.joinPosition());
                },
                (image) ->
                {
                    unavailable.incrementAndGet();
                    System.err.println("AeronPeer sub: image unavailable session=" + image.sessionId() +
                        " position=" + image.position());
                });
            final FragmentAssembler assembler = new FragmentAssembler(checker);
            final long deadline = System.nanoTime() + nanos(timeoutS);
            while (checker.received < count)
            {
                final int n = sub.poll(assembler, 256);
                if (n == 0 && System.nanoTime() > deadline)
                {
                    timedOut = true;
                    error("timed out after " + timeoutS + " s with " + checker.received + " of " + count +
                        " messages (" + sub.imageCount() + " images)");
                    break;
                }
                idle.idle(n);
            }
            if (!timedOut)
            {
                final long settleDeadline = System.nanoTime() + nanos(settleS);
                final long before = checker.received;
                while (System.nanoTime() < settleDeadline)
                {
                    idle.idle(sub.poll(assembler, 256));
                }
                if (checker.received > before)
                {
                    error((checker.received - before) + " messages arrived after the last expected one");
                }
            }
            sub.close();
        }
        catch (final Exception ex)
        {
            error("exception: " + ex);
        }
        final long end = checker.lastNs != 0 ? checker.lastNs : System.nanoTime();
        final double seconds = checker.received == 0 ? 0 : (end - checker.firstNs) / 1e9;
        report(checker.received, checker.bytes, checker.crc.getValue(), seconds,
            ",\"last_index\":" + checker.lastIndex + ",\"images\":" + available.get() +
            ",\"unavailable_images\":" + unavailable.get() + ",\"timed_out\":" + timedOut);
        return errorCount == 0 && checker.received == count ? 0 : 1;
    }

    public static void main(final String[] args)
    {
        final AeronPeer peer = new AeronPeer();
        peer.parse(args);
        final int status = peer.mode.equals("pub") ? peer.publish() : peer.subscribe();
        System.exit(status);
    }
}
