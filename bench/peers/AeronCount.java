/*
 * A fixed-count publisher and a counting subscriber for Aeron Java, used by
 * bench/udp_recovery.py to time moving N messages with and without loss, the
 * same way the native sulis benchmark (crates/sulis-bench udp-throughput
 * --count N) does. Compiled by bench/peers/aeron_java.py against each Aeron
 * jar (javac --release 11), so one source serves Aeron 1.15.1 and current.
 *
 *   java -cp <classes>:<aeron-all.jar> AeronCount pub <channel> <stream> <count> <warmup> <length> spin|yield
 *   java -cp <classes>:<aeron-all.jar> AeronCount sub <channel> <stream> <count> <warmup> spin|yield
 *
 * Both launch an embedded media driver (configured by the usual aeron.*
 * system properties: aeron.dir, aeron.threading.mode, idle strategies...).
 * The publisher offers <warmup> + <count> messages of <length> bytes with an
 * exclusive publication, prints "sent <total> <back-pressured offers>" and
 * keeps its driver running (retransmits may still be asked for) until its
 * stdin closes. The subscriber prints "ready", then "done <count> <ns from
 * message warmup+1 to message warmup+count>" (the warm-up messages let the
 * JIT compile the paths first). "yield" makes a client call Thread.yield()
 * when it could not progress (refused offer, empty poll) instead of spinning.
 */

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

public final class AeronCount
{
    private static long received;

    public static void main(final String[] args) throws Exception
    {
        if (args.length < 6)
        {
            System.err.println("usage: AeronCount pub|sub <channel> <stream> <count> <warmup> [<length>] spin|yield");
            System.exit(2);
        }
        final String role = args[0];
        final String channel = args[1];
        final int streamId = Integer.parseInt(args[2]);
        final long count = Long.parseLong(args[3]);
        final long warmup = Long.parseLong(args[4]);
        final boolean yield = "yield".equals(args[args.length - 1]);

        try (MediaDriver driver = MediaDriver.launchEmbedded();
            Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(driver.aeronDirectoryName())))
        {
            if ("pub".equals(role))
            {
                publish(aeron, channel, streamId, warmup + count, Integer.parseInt(args[5]), yield);
            }
            else
            {
                subscribe(aeron, channel, streamId, count, warmup, yield);
            }
        }
    }

    private static void idle(final boolean yield)
    {
        if (yield)
        {
            Thread.yield();
        }
        else
        {
            Thread.onSpinWait();
        }
    }

    private static void publish(
        final Aeron aeron, final String channel, final int streamId, final long count, final int length,
        final boolean yield) throws Exception
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
            for (long i = 0; i < count; i++)
            {
                buffer.putLong(0, i);
                while (publication.offer(buffer, 0, length) < 0)
                {
                    refused++;
                    idle(yield);
                }
            }
            System.out.println("sent " + count + " " + refused);
            // Keep the publication and the driver up for retransmits until told to go.
            while (System.in.read() >= 0)
            {
                // stdin closed = stop
            }
        }
    }

    private static void subscribe(
        final Aeron aeron, final String channel, final int streamId, final long count, final long warmup,
        final boolean yield)
    {
        final FragmentHandler handler = (buffer, offset, length, header) -> received++;
        try (Subscription subscription = aeron.addSubscription(channel, streamId))
        {
            System.out.println("ready");
            while (received <= warmup)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle(yield);
                }
            }
            final long start = System.nanoTime();
            final long first = received;
            while (received < warmup + count)
            {
                if (subscription.poll(handler, 10) == 0)
                {
                    idle(yield);
                }
            }
            final long elapsed = System.nanoTime() - start;
            // Messages after the one that started the clock (+1 for it).
            System.out.println("done " + (received - first + 1) + " " + elapsed);
        }
    }
}
