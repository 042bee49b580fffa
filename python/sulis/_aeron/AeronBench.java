/*
 * Aeron Java clients for sulis' benchmarks: the side-by-side Aeron rows of
 * `sulis bench --peer aeron` and of the scripts in bench/ (whose Aeron samples
 * cannot serve like-for-like: 1.15.1's StreamingPublisher/RateSubscriber and
 * the Ping/Pong samples hard-code busy-spinning clients). Each role mirrors
 * what the sulis side of those benchmarks does. sulis._aeron compiles this file
 * against the chosen aeron-all jar (javac --release 11), so one source serves
 * Aeron 1.15.1 and current releases.
 *
 *   AeronBench pub  <channel> <stream> <count> <warmup> <length> spin|yield
 *   AeronBench sub  <channel> <stream> <count> <warmup> spin|yield
 *   AeronBench rate <channel> <stream> <seconds> spin|yield
 *   AeronBench ping <ping-channel> <pong-channel> <count> <warmup> <length> spin|yield
 *   AeronBench pong <ping-channel> <pong-channel> <total> spin|yield
 *
 * Settings beyond the usual aeron.* system properties (aeron.dir, threading
 * mode, idle strategies, ...):
 *   sulis.bench.embedded      true (default): launch an embedded media driver
 *                             in aeron.dir; false: use the driver already there
 *   sulis.bench.progress      true: sub and ping print "progress <n>" about
 *                             four times a second
 *   sulis.bench.fragmentLimit fragments per poll of sub (default 10)
 *   sulis.bench.ping.stream, sulis.bench.pong.stream (default 1002, 1003)
 *
 * Clients use exclusive publications; "yield" makes a client call
 * Thread.yield() when it could not progress (refused offer, empty poll)
 * instead of spinning. Subscribers reassemble fragmented messages, so counts
 * are of messages whatever their length.
 *
 * pub:  prints "connected", offers warmup + count messages, prints
 *       "sent <total> <refused offers> <ns from first offer to last>".
 * sub:  prints "ready", then "done <messages> <ns>" timed from message
 *       warmup+1 (included) to the last (the warm-up lets the JIT compile first).
 * rate: prints "ready", then from its first message "interval <ns> <messages>"
 *       every second (clock read every 64 polls) for <seconds>, then "done <messages>".
 * ping: prints "rtt <ns> <ns> ..." with the count round trips after the warm-up ones.
 * pong: prints "ready", echoes <total> messages, prints "echoed <total>".
 *
 * After its last line every role keeps its driver up (retransmits may still be
 * asked for, another JVM may use it) until its stdin closes; a JVM whose stdin
 * is /dev/null exits at once.
 */

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.FragmentAssembler;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.BufferUtil;
import org.agrona.CloseHelper;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.UnsafeBuffer;

public final class AeronBench
{
    private static final int PING_STREAM = Integer.getInteger("sulis.bench.ping.stream", 1002);
    private static final int PONG_STREAM = Integer.getInteger("sulis.bench.pong.stream", 1003);
    private static final boolean EMBEDDED = !"false".equals(System.getProperty("sulis.bench.embedded"));
    private static final boolean PROGRESS = Boolean.getBoolean("sulis.bench.progress");
    private static final int FRAGMENT_LIMIT = Integer.getInteger("sulis.bench.fragmentLimit", 10);
    private static final long PROGRESS_INTERVAL_NS = 250_000_000L;

    private static long received;
    private static boolean yielding;
    private static ExclusivePublication echoPublication;
    private static long nextProgressNs;

    public static void main(final String[] args) throws Exception
    {
        if (args.length < 4)
        {
            System.err.println("usage: AeronBench pub|sub|rate|ping|pong ... spin|yield (see the source)");
            System.exit(2);
        }
        final String role = args[0];
        yielding = "yield".equals(args[args.length - 1]);

        final MediaDriver driver = EMBEDDED ? MediaDriver.launchEmbedded() : null;
        final Aeron.Context context = new Aeron.Context();
        if (driver != null)
        {
            context.aeronDirectoryName(driver.aeronDirectoryName());
        }
        try (Aeron aeron = Aeron.connect(context))
        {
            switch (role)
            {
                case "pub":
                    publish(aeron, args[1], Integer.parseInt(args[2]),
                        Long.parseLong(args[3]) + Long.parseLong(args[4]), Integer.parseInt(args[5]));
                    break;
                case "sub":
                    subscribe(aeron, args[1], Integer.parseInt(args[2]), Long.parseLong(args[3]),
                        Long.parseLong(args[4]));
                    break;
                case "rate":
                    rate(aeron, args[1], Integer.parseInt(args[2]), Double.parseDouble(args[3]));
                    break;
                case "ping":
                    ping(aeron, args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]));
                    break;
                case "pong":
                    pong(aeron, args[1], args[2], Long.parseLong(args[3]));
                    break;
                default:
                    System.err.println("unknown role " + role);
                    System.exit(2);
            }
        }
        finally
        {
            CloseHelper.close(driver);
        }
    }

    private static void idle()
    {
        if (yielding)
        {
            Thread.yield();
        }
        else
        {
            Thread.onSpinWait();
        }
    }

    private static void progress(final long done)
    {
        final long now = System.nanoTime();
        if (now >= nextProgressNs)
        {
            nextProgressNs = now + PROGRESS_INTERVAL_NS;
            System.out.println("progress " + done);
        }
    }

    /** Writes the message's sequence number into it (as much of it as fits). */
    private static void stamp(final UnsafeBuffer buffer, final int length, final long i)
    {
        if (length >= 8)
        {
            buffer.putLong(0, i);
        }
        else
        {
            buffer.putByte(0, (byte)i);
        }
    }

    private static void awaitStdinClosed() throws Exception
    {
        while (System.in.read() >= 0)
        {
            // the orchestrator closes our stdin when we may go
        }
    }

    private static void publish(
        final Aeron aeron, final String channel, final int streamId, final long total, final int length)
        throws Exception
    {
        final UnsafeBuffer buffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(length, 64));
        long refused = 0;
        try (ExclusivePublication publication = aeron.addExclusivePublication(channel, streamId))
        {
            while (!publication.isConnected())
            {
                Thread.sleep(1);
            }
            System.out.println("connected");
            final long start = System.nanoTime();
            for (long i = 0; i < total; i++)
            {
                stamp(buffer, length, i);
                while (publication.offer(buffer, 0, length) < 0)
                {
                    refused++;
                    idle();
                }
            }
            System.out.println("sent " + total + " " + refused + " " + (System.nanoTime() - start));
            awaitStdinClosed();
        }
    }

    private static void subscribe(
        final Aeron aeron, final String channel, final int streamId, final long count, final long warmup)
        throws Exception
    {
        final FragmentAssembler handler = new FragmentAssembler((buffer, offset, length, header) -> received++);
        try (Subscription subscription = aeron.addSubscription(channel, streamId))
        {
            System.out.println("ready");
            int polls = 0;
            while (received <= warmup)
            {
                if (subscription.poll(handler, FRAGMENT_LIMIT) == 0)
                {
                    idle();
                }
                if (PROGRESS && (++polls & 63) == 0)
                {
                    progress(received);
                }
            }
            final long start = System.nanoTime();
            final long first = received;
            while (received < warmup + count)
            {
                if (subscription.poll(handler, FRAGMENT_LIMIT) == 0)
                {
                    idle();
                }
                if (PROGRESS && (++polls & 63) == 0)
                {
                    progress(received);
                }
            }
            final long elapsed = System.nanoTime() - start;
            // From the message that started the clock (included) to the last.
            System.out.println("done " + (received - first + 1) + " " + elapsed);
            awaitStdinClosed();
        }
    }

    private static void rate(final Aeron aeron, final String channel, final int streamId, final double seconds)
        throws Exception
    {
        final FragmentHandler handler = (buffer, offset, length, header) -> received++;
        try (Subscription subscription = aeron.addSubscription(channel, streamId))
        {
            System.out.println("ready");
            while (received == 0)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle();
                }
            }
            final long start = System.nanoTime();
            final long end = start + (long)(seconds * 1e9);
            long intervalStart = start;
            long next = start + 1_000_000_000L;
            long last = received;
            int polls = 0;
            while (true)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle();
                }
                if ((++polls & 63) == 0)
                {
                    final long now = System.nanoTime();
                    if (now >= next)
                    {
                        System.out.println("interval " + (now - intervalStart) + " " + (received - last));
                        last = received;
                        intervalStart = now;
                        next += 1_000_000_000L;
                        if (now >= end)
                        {
                            break;
                        }
                    }
                }
            }
            System.out.println("done " + received);
            awaitStdinClosed();
        }
    }

    private static void ping(
        final Aeron aeron, final String pingChannel, final String pongChannel, final int count, final int warmup,
        final int length) throws Exception
    {
        final UnsafeBuffer buffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(length, 64));
        final FragmentAssembler handler = new FragmentAssembler((b, offset, len, header) -> received++);
        final long[] rtt = new long[count];
        try (ExclusivePublication publication = aeron.addExclusivePublication(pingChannel, PING_STREAM);
            Subscription subscription = aeron.addSubscription(pongChannel, PONG_STREAM))
        {
            while (!publication.isConnected() || subscription.imageCount() == 0)
            {
                Thread.sleep(1);
            }
            for (int i = 0; i < warmup + count; i++)
            {
                stamp(buffer, length, i);
                final long before = received;
                final long t0 = System.nanoTime();
                while (publication.offer(buffer, 0, length) < 0)
                {
                    idle();
                }
                while (received == before)
                {
                    if (subscription.poll(handler, 1) == 0)
                    {
                        idle();
                    }
                }
                final long t1 = System.nanoTime();
                if (i >= warmup)
                {
                    rtt[i - warmup] = t1 - t0;
                }
                if (PROGRESS && (i & 1023) == 0)
                {
                    progress(i);
                }
            }
        }
        final StringBuilder sb = new StringBuilder(count * 7 + 4).append("rtt");
        for (final long ns : rtt)
        {
            sb.append(' ').append(ns);
        }
        System.out.println(sb);
        awaitStdinClosed();
    }

    private static void echo(final DirectBuffer buffer, final int offset, final int length)
    {
        while (echoPublication.offer(buffer, offset, length) < 0)
        {
            idle();
        }
        received++;
    }

    private static void pong(final Aeron aeron, final String pingChannel, final String pongChannel, final long total)
        throws Exception
    {
        try (Subscription subscription = aeron.addSubscription(pingChannel, PING_STREAM);
            ExclusivePublication publication = aeron.addExclusivePublication(pongChannel, PONG_STREAM))
        {
            echoPublication = publication;
            final FragmentAssembler handler =
                new FragmentAssembler((buffer, offset, length, header) -> echo(buffer, offset, length));
            System.out.println("ready");
            while (received < total)
            {
                if (subscription.poll(handler, 1) == 0)
                {
                    idle();
                }
            }
            System.out.println("echoed " + received);
            awaitStdinClosed();
        }
    }
}
