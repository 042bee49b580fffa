"""Channel URI cases shared by the URI tests (tests/unit/test_uri.py,
tests/system/test_uri_system.py) and the seeded random-input runner, which
mutates them: malformed URIs with the part each error must name, and good
URIs with their canonical form."""

from __future__ import annotations

# (uri, the part the message must name, a word of the reason)
BAD_URIS = [
    # prefix and media
    ("", "uri", "empty"),
    ("udp?endpoint=localhost:40123", "udp", "aeron:"),
    ("Aeron:ipc", "Aeron:ipc", "aeron:"),
    ("aeron-spy:udp", "aeron-spy:udp", "aeron:"),
    ("ipc", "ipc", "must start with 'aeron:'"),
    ("?aeron:ipc", "?aeron:ipc", "must start with 'aeron:'"),  # found by the random-input runner
    ("aeron:", "aeron:", "missing media"),
    ("aeron:?mtu=1408", "aeron:", "missing media"),
    ("aeron:tcp?endpoint=localhost:1", "aeron:tcp", "unknown media"),
    ("aeron:UDP?endpoint=localhost:1", "aeron:UDP", "unknown media"),
    ("aeron:ipc:mtu=1408", "aeron:ipc:mtu=1408", "unknown media"),
    ("aeron-spy:aeron:ipc", "aeron-spy:aeron:ipc", "UDP"),
    # parameter syntax
    ("aeron:ipc?", "parameter 1", "empty"),
    ("aeron:ipc?mtu=1408|", "parameter 2", "empty"),
    ("aeron:ipc?mtu=1408||sparse=true", "parameter 2", "empty"),
    ("aeron:ipc?sparse", "sparse", "missing '='"),
    ("aeron:ipc?=true", "=true", "missing parameter name"),
    ("aeron:ipc?sparse=", "sparse=", "missing value"),
    ("aeron:ipc?colour=blue", "colour=blue", "unknown parameter"),
    ("aeron:ipc?term-lenght=64k", "term-lenght=64k", "did you mean 'term-length'"),
    ("aeron:ipc?spies-simulate-connection=true", "spies-simulate-connection=true", "ssc"),
    ("aeron:ipc?alias=" + "x" * 4100, "length", "maximum is 4095"),
    # term length and mtu
    ("aeron:ipc?term-length=100k", "term-length=100k", "power of two"),
    ("aeron:ipc?term-length=32k", "term-length=32k", "between 64k and 1g"),
    ("aeron:ipc?term-length=2g", "term-length=2g", "between 64k and 1g"),
    ("aeron:ipc?term-length=big", "term-length=big", "not a size"),
    ("aeron:ipc?term-length=-64k", "term-length=-64k", "not a size"),
    ("aeron:ipc?mtu=32", "mtu=32", "greater than 32"),
    ("aeron:ipc?mtu=1400", "mtu=1400", "multiple of 32"),
    ("aeron:ipc?mtu=65536", "mtu=65536", "65504"),
    ("aeron:ipc?mtu=-1", "mtu=-1", "not a size"),
    ("aeron:ipc?mtu=1.5k", "mtu=1.5k", "not a size"),
    ("aeron:ipc?term-length=64k|mtu=9k", "mtu=9k", "maximum message length"),
    # start position
    ("aeron:ipc?init-term-id=1", "init-term-id=1", "missing term-id and term-offset"),
    ("aeron:ipc?term-id=1|term-offset=0", "term-id=1", "missing init-term-id"),
    ("aeron:ipc?term-offset=0|init-term-id=3", "term-offset=0", "missing term-id"),
    ("aeron:ipc?init-term-id=10|term-id=9|term-offset=0", "term-id=9", "behind init-term-id"),
    ("aeron:ipc?init-term-id=x|term-id=0|term-offset=0", "init-term-id=x", "32-bit"),
    ("aeron:ipc?init-term-id=0|term-id=3000000000|term-offset=0", "term-id=3000000000", "32-bit"),
    ("aeron:ipc?init-term-id=0|term-id=0|term-offset=33", "term-offset=33", "multiple of 32"),
    ("aeron:ipc?init-term-id=0|term-id=0|term-offset=-32", "term-offset=-32", "non-negative"),
    ("aeron:ipc?term-length=64k|init-term-id=0|term-id=0|term-offset=65536", "term-offset=65536",
     "less than term-length"),
    # session id
    ("aeron:ipc?session-id=abc", "session-id=abc", "32-bit signed integer"),
    ("aeron:ipc?session-id=3000000000", "session-id=3000000000", "32-bit signed integer"),
    ("aeron:ipc?session-id=tag:", "session-id=tag:", "tag"),
    ("aeron:ipc?session-id=tag:x", "session-id=tag:x", "64-bit integer"),
    # booleans
    ("aeron:ipc?sparse=yes", "sparse=yes", "true or false"),
    ("aeron:ipc?tether=TRUE", "tether=TRUE", "true or false"),
    ("aeron:ipc?eos=1", "eos=1", "true or false"),
    ("aeron:ipc?rejoin=no", "rejoin=no", "true or false"),
    ("aeron:ipc?group=maybe", "group=maybe", "infer"),
    # durations and sizes
    ("aeron:ipc?linger=5h", "linger=5h", "not a duration"),
    ("aeron:ipc?linger=5 s", "linger=5 s", "not a duration"),
    ("aeron:ipc?linger=-1s", "linger=-1s", "not a duration"),
    ("aeron:ipc?untethered-linger-timeout=99999999999999999999s", "untethered-linger-timeout=99999999999999999999s",
     "too long"),
    ("aeron:udp?endpoint=h:1|nak-delay=fast", "nak-delay=fast", "not a duration"),
    ("aeron:ipc?pub-wnd=0", "pub-wnd=0", "greater than zero"),
    ("aeron:ipc?term-length=64k|pub-wnd=33k", "pub-wnd=33k", "half of term-length"),
    ("aeron:ipc?mtu=8k|pub-wnd=4k", "pub-wnd=4k", "at least mtu"),
    ("aeron:udp?endpoint=h:1|so-rcvbuf=lots", "so-rcvbuf=lots", "not a size"),
    ("aeron:udp?endpoint=h:1|so-sndbuf=5g", "so-sndbuf=5g", "too large"),
    ("aeron:udp?endpoint=h:1|rcv-wnd=0", "rcv-wnd=0", "greater than zero"),
    # other values
    ("aeron:ipc?max-resend=0", "max-resend=0", "1 to 256"),
    ("aeron:ipc?max-resend=257", "max-resend=257", "1 to 256"),
    ("aeron:ipc?stream-id=2147483648", "stream-id=2147483648", "32-bit"),
    ("aeron:ipc?gtag=1.5", "gtag=1.5", "64-bit"),
    ("aeron:ipc?response-correlation-id=proto", "response-correlation-id=proto", "prototype"),
    ("aeron:udp?endpoint=h:1|ttl=256", "ttl=256", "0 to 255"),
    ("aeron:udp?endpoint=h:1|cc=reno", "cc=reno", "static or cubic"),
    ("aeron:udp?endpoint=h:1|fc=fastest", "fc=fastest", "not a flow control"),
    ("aeron:udp?endpoint=h:1|fc=min,", "fc=min,", "empty option"),
    ("aeron:udp?control-mode=auto", "control-mode=auto", "dynamic, manual or response"),
    ("aeron:udp?tags=a", "tags=a", "64-bit integers"),
    ("aeron:udp?endpoint=h:1|channel-rcv-ts-offset=-8", "channel-rcv-ts-offset=-8", "byte offset"),
    # media rules: udp needs an address, ipc takes none
    ("aeron:udp", "aeron:udp", "needs an endpoint"),
    ("aeron:udp?mtu=1408|control-mode=dynamic", "aeron:udp", "needs an endpoint"),
    ("aeron:ipc?endpoint=localhost:40123", "endpoint=localhost:40123", "only for UDP"),
    ("aeron:ipc?interface=10.0.0.1", "interface=10.0.0.1", "only for UDP"),
    ("aeron:ipc?mtu=1408|control=localhost:1", "control=localhost:1", "only for UDP"),
    # addresses
    ("aeron:udp?endpoint=localhost", "endpoint=localhost", "missing port"),
    ("aeron:udp?endpoint=localhost:", "endpoint=localhost:", "port"),
    ("aeron:udp?endpoint=localhost:65536", "endpoint=localhost:65536", "out of range"),
    ("aeron:udp?endpoint=localhost:http", "endpoint=localhost:http", "not a number"),
    ("aeron:udp?endpoint=::1:40123", "endpoint=::1:40123", "brackets"),
    ("aeron:udp?endpoint=[::1:40123", "endpoint=[::1:40123", "']'"),
    ("aeron:udp?endpoint=[::g]:1", "endpoint=[::g]:1", "IPv6"),
    ("aeron:udp?endpoint=256.0.0.1:1", "endpoint=256.0.0.1:1", "IPv4"),
    ("aeron:udp?endpoint=:40123", "endpoint=:40123", "missing host"),
    ("aeron:udp?control=bad host:1", "control=bad host:1", "host name"),
    ("aeron:udp?endpoint=224.0.1.1:40456|interface=10.0.0.1/33", "interface=10.0.0.1/33", "prefix length"),
]


GOOD_URIS = [
    ("aeron:ipc", "aeron:ipc", []),
    ("aeron:ipc?term-length=64k", "aeron:ipc?term-length=64k", [("term-length", "64k")]),
    ("aeron:ipc?mtu=1408|alias=a|mtu=4096", "aeron:ipc?mtu=4096|alias=a", [("mtu", "4096"), ("alias", "a")]),
    ("aeron:ipc?init-term-id=2147483646|term-id=2147483646|term-offset=0",
     "aeron:ipc?init-term-id=2147483646|term-id=2147483646|term-offset=0",
     [("init-term-id", "2147483646"), ("term-id", "2147483646"), ("term-offset", "0")]),
    # term-id may wrap past int32 max: the term count is a wrapping difference
    ("aeron:ipc?init-term-id=2147483647|term-id=-2147483647|term-offset=64", None, None),
    ("aeron:ipc?session-id=-17|tether=false|sparse=true|linger=250ms", None, None),
    ("aeron:ipc?session-id=tag:9000000000", None, None),
    ("aeron:ipc?stream-id=-3", None, None),
    ("aeron:ipc?group=infer|eos=false", None, None),
    ("aeron:udp?endpoint=localhost:40123|term-length=64k|linger=2s", None, None),
    ("aeron:udp?endpoint=[::1]:40123", None, None),
    ("aeron:udp?endpoint=224.10.9.7:40456|interface=192.168.1.0/24|ttl=16", None, None),
    ("aeron:udp?control-mode=manual", None, None),
    ("aeron:udp?tags=7,-8", None, None),
    ("aeron-spy:aeron:udp?endpoint=localhost:40123", None, None),
    ("aeron:ipc?alias=" + "x" * (4095 - 16), None, None),
]


# Multi-destination-cast publications, their receivers and multi-destination subscriptions:
# accepted where Aeron accepts them. (uri, publication accepted, subscription accepted)
MDC_URIS = [
    ("aeron:udp?endpoint=localhost:40132|control-mode=manual", True, True),
    ("aeron:udp?endpoint=localhost:40133|control=localhost:40134", True, True),
    ("aeron:udp?control=localhost:40135|control-mode=dynamic", True, True),
    ("aeron:udp?control-mode=manual", True, True),
    ("aeron:udp?endpoint=localhost:40131|control-mode=dynamic", False, False),
    ("aeron:udp?control=localhost:40136", False, True),
]
