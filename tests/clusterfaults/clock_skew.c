/* A process's wall clock set off by SULIS_TEST_CLOCK_SKEW_MS milliseconds (LD_PRELOAD), for the
 * cluster's clock-skew test: CLOCK_REALTIME (what Rust's SystemTime and Python's time.time read)
 * moves by the skew; the monotonic clocks are left alone. libfaketime would do, but is not on
 * every machine; this is the one call the test needs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static long long skew_ns;

__attribute__((constructor)) static void init(void) {
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const char *s = getenv("SULIS_TEST_CLOCK_SKEW_MS");
    skew_ns = s ? atoll(s) * 1000000LL : 0;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) && skew_ns != 0) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}
