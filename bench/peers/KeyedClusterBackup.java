/*
 * Aeron's ClusterBackupMediaDriver (a driver, an archive and ClusterBackup in one JVM, configured by
 * system properties as its own main is) with a CredentialsSupplier that holds a principal and a secret
 * of a sulis cluster's client keys file (tests/interop/test_cluster_interop.py):
 *
 *   KeyedClusterBackup principal=NAME secret_file=PATH
 *
 * Its BackupQuery names the principal. It answers the member's Challenge with the HMAC-SHA256, under the
 * secret, of the challenge and of the response channel its query named (the backup's consensus channel),
 * as a sulis ClusterClient answers. The secret is read from PATH (its first line, trimmed), never taken
 * from the command line. Runs until SIGINT or SIGTERM.
 */

import io.aeron.archive.Archive;
import io.aeron.cluster.ClusterBackup;
import io.aeron.cluster.ClusterBackupMediaDriver;
import io.aeron.driver.MediaDriver;
import io.aeron.security.CredentialsSupplier;
import org.agrona.concurrent.ShutdownSignalBarrier;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;

public final class KeyedClusterBackup {
    public static void main(final String[] args) throws Exception {
        String principal = null;
        String secretFile = null;
        for (final String arg : args) {
            final int eq = arg.indexOf('=');
            if (eq > 0 && "principal".equals(arg.substring(0, eq))) {
                principal = arg.substring(eq + 1);
            } else if (eq > 0 && "secret_file".equals(arg.substring(0, eq))) {
                secretFile = arg.substring(eq + 1);
            }
        }
        if (null == principal || null == secretFile) {
            System.err.println("usage: KeyedClusterBackup principal=NAME secret_file=PATH");
            System.exit(2);
        }
        final String secret = Files.readAllLines(Paths.get(secretFile), StandardCharsets.UTF_8).get(0).trim();
        final byte[] name = principal.getBytes(StandardCharsets.UTF_8);
        final SecretKeySpec key = new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256");
        final ClusterBackup.Context backup = new ClusterBackup.Context();
        backup.credentialsSupplier(new CredentialsSupplier() {
            public byte[] encodedCredentials() {
                return name;
            }

            public byte[] onChallenge(final byte[] challenge) {
                try {
                    final Mac mac = Mac.getInstance("HmacSHA256");
                    mac.init(key);
                    mac.update(challenge);
                    // What the BackupQuery named as its response channel.
                    return mac.doFinal(backup.consensusChannel().getBytes(StandardCharsets.UTF_8));
                } catch (final GeneralSecurityException e) {
                    throw new IllegalStateException("HmacSHA256", e);
                }
            }
        });
        final ShutdownSignalBarrier barrier = new ShutdownSignalBarrier();
        try (ClusterBackupMediaDriver ignore = ClusterBackupMediaDriver.launch(
            new MediaDriver.Context().terminationHook(barrier::signalAll),
            new Archive.Context(),
            backup.terminationHook(barrier::signalAll))) {
            barrier.await();
        }
    }
}
