/*
 * Aeron Java clients for the UDP benchmarks that Aeron's own samples cannot
 * serve like-for-like: a publisher, a subscriber that counts per second
 * (bench/udp_throughput.py: 1.15.1's StreamingPublisher/RateSubscriber
 * hard-code busy-spinning clients), a fixed-count publisher and a counting
 * subscriber (bench/udp_recovery.py) and a ping/pong whose clients can yield
 * while they wait (bench/udp_latency.py; the Ping/Pong samples always
 * busy-spin). Each mirrors what the native sulis benchmark (crates/sulis-bench
 * udp-throughput, udp-latency) does. Compiled by bench/peers/aeron_java.py
 * against each Aeron jar (javac --release 11), so one source serves 1.15.1 and
 * current.
 *
 *   AeronBench pub  <channel> <stream> <count> <warmup> <length> spin|yield
 *   AeronBench sub  <channel> <stream> <count> <warmup> spin|yield
 *   AeronBench rate <channel> <stream> <seconds> spin|yield
 *   AeronBench ping <ping-channel> <pong-channel> <count> <warmup> <length> spin|yield
 *   AeronBench pong <ping-channel> <pong-channel> <total> spin|yield
 *
 * Every role launches an embedded media driver configured by the usual aeron.*
 * system properties (aeron.dir, aeron.threading.mode, idle strategies...) and
 * uses exclusive publications. "yield" makes a client call Thread.yield() when
 * it could not progress (refused offer, empty poll) instead of spinning.
 *
 * pub:  offers warmup + count messages, prints "sent <total> <refused offers>",
 *       then keeps its driver up (retransmits may still be asked for) until
 *       its stdin closes.
 * sub:  prints "ready", then "done <messages> <ns>" timed from message
 *       warmup+1 to the last (the warm-up lets the JIT compile first).
 * rate: prints "ready", then from its first message "interval <ns> <messages>"
 *       every second (clock read every 64 polls, as sulis' udp-throughput
 *       subscriber does) for <seconds>, then "done <messages>".
 * ping: stream 1002 out, 1003 back; prints "rtt <ns> <ns> ..." with the count
 *       round trips after the warm-up ones.
 * pong: echoes <total> messages from 1002 to 1003, prints "echoed <total>",
 *       then waits for its stdin to close.
 */

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.BufferUtil;
import org.agrona.DirectBuffer;
import org.agrona.concurrent.UnsafeBuffer;

public final class AeronBench
{
    private static final int PING_STREAM = 1002;
    private static final int PONG_STREAM = 1003;

    private static long received;
    private static boolean yielding;
    private static ExclusivePublication echoPublication;

    public static void main(final String[] args) throws Exception
    {
        if (args.length < 4)
        {
            System.err.println("usage: AeronBench pub|sub|ping|pong ... spin|yield (see the source)");
            System.exit(2);
        }
        final String role = args[0];
        yielding = "yield".equals(args[args.length - 1]);

        try (MediaDriver driver = MediaDriver.launchEmbedded();
            Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(driver.aeronDirectoryName())))
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
            for (long i = 0; i < total; i++)
            {
                buffer.putLong(0, i);
                while (publication.offer(buffer, 0, length) < 0)
                {
                    refused++;
                    idle();
                }
            }
            System.out.println("sent " + total + " " + refused);
            awaitStdinClosed();
        }
    }

    private static void subscribe(
        final Aeron aeron, final String channel, final int streamId, final long count, final long warmup)
    {
        final FragmentHandler handler = (buffer, offset, length, header) -> received++;
        try (Subscription subscription = aeron.addSubscription(channel, streamId))
        {
            System.out.println("ready");
            while (received <= warmup)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle();
                }
            }
            final long start = System.nanoTime();
            final long first = received;
            while (received < warmup + count)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle();
                }
            }
            final long elapsed = System.nanoTime() - start;
            // From the message that started the clock (included) to the last.
            System.out.println("done " + (received - first + 1) + " " + elapsed);
        }
    }

    private static void rate(final Aeron aeron, final String channel, final int streamId, final double seconds)
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
        }
    }

    private static void ping(
        final Aeron aeron, final String pingChannel, final String pongChannel, final int count, final int warmup,
        final int length) throws Exception
    {
        final UnsafeBuffer buffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(length, 64));
        final FragmentHandler handler = (b, offset, len, header) -> received++;
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
                buffer.putInt(length - 4, i);
                final long t0 = System.nanoTime();
                while (publication.offer(buffer, 0, length) < 0)
                {
                    idle();
                }
                while (subscription.poll(handler, 1) == 0)
                {
                    idle();
                }
                final long t1 = System.nanoTime();
                if (i >= warmup)
                {
                    rtt[i - warmup] = t1 - t0;
                }
            }
        }
        final StringBuilder sb = new StringBuilder(count * 7 + 4).append("rtt");
        for (final long ns : rtt)
        {
            sb.append(' ').append(ns);
        }
        System.out.println(sb);
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
            final FragmentHandler handler = (buffer, offset, length, header) -> echo(buffer, offset, length);
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
