"""Response channels (``control-mode=response``), sulis to sulis: a server answers each client over one
response port and knows no client address in advance.

The client subscribes on ``aeron:udp?control-mode=response|control=<server>:<response port>`` and
publishes its requests with ``response-correlation-id=<that subscription>``; the server publishes its
answers on ``aeron:udp?control-mode=response|control=<server>:<response port>|response-correlation-id=<the
request image's correlation id>``. Over IPC the same with ``aeron:ipc``. Each case is checked end to
end (every answer reaches its own client and no other), on the wire (SEND_RESPONSE_SETUP, RSP_SETUP,
where the response publication sends), and through a relay that changes the client's source port, as a
NAT would. Errors name what is wrong, as Aeron's do.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

import sulis
from conftest import await_until
from conftest import free_udp_port as free_port
from netutil.relay import RelayProcess

REQUEST_STREAM, RESPONSE_STREAM = 1001, 1002
OPTIONS = {"timer_interval": "10ms", "status_message_timeout": "50ms", "publication_connection_timeout": "1s"}


def with_param(channel: str, param: str) -> str:
    return f"{channel}{'|' if '?' in channel else '?'}{param}"


def offer(pub, data: bytes, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while (r := pub.offer(data)) < 0:
        assert r != sulis.CLOSED and time.monotonic() < deadline, sulis.result_name(r)
        time.sleep(0.001)
    return r


def take(sub, count: int, timeout: float = 10.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {got}, waiting for {count}"
        if sub.poll(lambda b, h: got.append(bytes(b)), 10) == 0:
            time.sleep(0.001)
    return got


class Server:
    """A request subscription on ``request`` and one response publication per request image."""

    def __init__(self, client, request: str, response: str):
        self.client, self.response = client, response
        self.sub = client.add_subscription(request, REQUEST_STREAM)
        self.answers: dict[int, object] = {}

    def accept(self, count: int = 1, timeout: float = 10.0) -> list:
        await_until(lambda: len(self.sub.images) >= count, timeout, "request images")
        for image in self.sub.images:
            if image.correlation_id not in self.answers:
                channel = with_param(self.response, f"response-correlation-id={image.correlation_id}")
                self.answers[image.session_id] = self.client.add_publication(channel, RESPONSE_STREAM)
        return list(self.answers.values())

    def echo(self, timeout: float = 10.0) -> int:
        """Answers every waiting request on its own session's response publication, prefixed b're:'."""
        seen = []
        self.sub.poll(lambda b, h: seen.append((h.session_id, bytes(b))), 100)
        for session_id, data in seen:
            offer(self.answers[session_id], b"re:" + data, timeout)
        return len(seen)


def request_pair(client, request: str, response: str):
    """The client side: the response subscription, then the request publication naming it."""
    rsp = client.add_subscription(response, RESPONSE_STREAM)
    req = client.add_publication(with_param(request, f"response-correlation-id={rsp.registration_id}"),
                                 REQUEST_STREAM)
    return req, rsp


def round_trip(server, pairs, n: int = 20) -> None:
    for k, (req, _) in enumerate(pairs):
        for i in range(n):
            offer(req, f"c{k}-{i}".encode())
    deadline = time.monotonic() + 10
    answered = 0
    while answered < n * len(pairs):
        assert time.monotonic() < deadline, f"{answered} answered"
        answered += server.echo()
    for k, (_, rsp) in enumerate(pairs):
        assert take(rsp, n) == [f"re:c{k}-{i}".encode() for i in range(n)]
        assert take(rsp, 0) == [] and rsp.poll(lambda b, h: None, 10) == 0, f"client {k} got more"


@pytest.mark.parametrize("shared", [False, True], ids=["exclusive", "concurrent"])
def test_two_clients_on_two_drivers_each_get_only_their_answers_over_udp(make_driver, shared):
    server_driver = make_driver(**OPTIONS)
    client_driver = make_driver(**OPTIONS)
    request_port, response_port = free_port(), free_port()
    request = f"aeron:udp?endpoint=127.0.0.1:{request_port}"
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{response_port}"
    with sulis.Client(dir=server_driver.dir) as sc, sulis.Client(dir=client_driver.dir) as cc:
        server = Server(sc, request, response)
        pairs = [request_pair(cc, request, response) for _ in range(2)]
        server.accept(2)
        if shared:
            # A second, concurrent answer publication for the same image joins the first.
            image = server.sub.images[0]
            again = sc.add_publication(f"{response}|response-correlation-id={image.correlation_id}",
                                       RESPONSE_STREAM)
            assert again.session_id == server.answers[image.session_id].session_id
        await_until(lambda: all(rsp.is_connected for _, rsp in pairs), 10, "response images")
        # Each response subscription took the session of its own answer publication.
        assert sorted(rsp.images[0].session_id for _, rsp in pairs) == sorted(
            p.session_id for p in server.answers.values())
        # The answers come from the server's response port, on one socket for both clients.
        assert {rsp.images[0].source_identity for _, rsp in pairs} == {f"127.0.0.1:{response_port}"}
        round_trip(server, pairs)


def test_a_request_stream_closed_as_soon_as_it_is_answered_still_gets_its_answer(make_driver):
    """Aeron's ``AeronArchive.startReplay`` closes its request publication as soon as the archive has
    answered, which is when the response publication exists. The server's image must still tell the
    client which session answers it (RSP_SETUP at once, not at the next status-message period, and on
    for a while after the request stream ended); a long status-message period makes the race certain."""
    server_driver = make_driver(**{**OPTIONS, "status_message_timeout": "2s"})
    client_driver = make_driver(**OPTIONS)
    request = f"aeron:udp?endpoint=127.0.0.1:{free_port()}"
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_port()}"
    with sulis.Client(dir=server_driver.dir) as sc, sulis.Client(dir=client_driver.dir) as cc:
        server = Server(sc, request, response)
        for k in range(3):
            req, rsp = request_pair(cc, request, response)
            await_until(lambda req=req: req.is_connected, 10, "request stream")
            server.answers.clear()
            (answer,) = server.accept()
            req.close()
            await_until(lambda rsp=rsp: rsp.is_connected, 10, f"answer {k} to a closed request stream")
            offer(answer, f"answer {k}".encode())
            assert take(rsp, 1) == [f"answer {k}".encode()]
            answer.close()
            rsp.close()
            await_until(lambda: server.sub.images == [], 10, "request image gone")


def test_ipc_response_channel(driver, client):
    server = Server(client, "aeron:ipc", "aeron:ipc?control-mode=response")
    pairs = [request_pair(client, "aeron:ipc", "aeron:ipc?control-mode=response") for _ in range(2)]
    answers = server.accept(2)
    # For IPC the request image's correlation id is the request publication's registration id.
    assert {i.correlation_id for i in server.sub.images} == {req.registration_id for req, _ in pairs}
    await_until(lambda: all(rsp.is_connected for _, rsp in pairs), 10, "response images")
    assert sorted(rsp.images[0].session_id for _, rsp in pairs) == sorted(p.session_id for p in answers)
    round_trip(server, pairs)


def test_a_response_subscription_waits_for_its_session_and_sees_nothing_else(make_driver):
    """Until the server names a session, a response subscription matches no stream, even one on its
    own stream id sent to its port."""
    d = make_driver(**OPTIONS)
    with sulis.Client(dir=d.dir) as c:
        rsp = c.add_subscription(f"aeron:udp?control-mode=response|control=127.0.0.1:{free_port()}",
                                 RESPONSE_STREAM)
        (port,) = [a.rsplit(":", 1)[1] for a in rsp.local_socket_addresses()]
        stray = c.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", RESPONSE_STREAM)
        ipc_rsp = c.add_subscription("aeron:ipc?control-mode=response", RESPONSE_STREAM)
        ipc_stray = c.add_publication("aeron:ipc", RESPONSE_STREAM)
        time.sleep(0.5)
        assert not stray.is_connected and rsp.images == []
        assert ipc_rsp.images == [] and not ipc_stray.is_connected


@pytest.mark.expect_errors
def test_errors_name_what_is_wrong(make_driver):
    server_driver = make_driver(**OPTIONS)
    client_driver = make_driver(**OPTIONS)
    request = f"aeron:udp?endpoint=127.0.0.1:{free_port()}"
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_port()}"
    with sulis.Client(dir=server_driver.dir) as sc, sulis.Client(dir=client_driver.dir) as cc:
        plain_sub = cc.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{free_port()}", 9)
        cases = [
            (sc, response, "control-mode=response was specified, but no response-correlation-id set"),
            (sc, f"{response}|response-correlation-id=424242", "image.correlationId=424242 not found"),
            (cc, f"{request}|response-correlation-id=777", "unable to find response subscription for "
                                                          "response-correlation-id=777"),
            (cc, f"{request}|response-correlation-id={plain_sub.registration_id}",
             "unable to find response subscription"),
            (cc, "aeron:ipc?response-correlation-id=778", "unable to find response subscription"),
        ]
        for c, channel, why in cases:
            with pytest.raises(sulis.RegistrationError, match=why):
                c.add_publication(channel, RESPONSE_STREAM)
        # An invalid channel (Aeron's INVALID_CHANNEL) is a configuration error.
        for add in (cc.add_publication, cc.add_subscription):
            with pytest.raises(sulis.ConfigurationError, match="needs control=host:port"):
                add("aeron:udp?control-mode=response", RESPONSE_STREAM)
        for bad in ("what", "-3"):
            with pytest.raises(sulis.SulisError, match="response-correlation-id"):
                cc.add_publication(f"{request}|response-correlation-id={bad}", REQUEST_STREAM)
        # An image that did not ask for a response channel.
        server = Server(sc, request, response)
        plain_request = cc.add_publication(request, REQUEST_STREAM)
        await_until(lambda: server.sub.images, 10, "request image")
        image = server.sub.images[0]
        with pytest.raises(sulis.RegistrationError, match=f"image.correlationId={image.correlation_id} did not "
                                                          "request a response channel"):
            sc.add_publication(f"{response}|response-correlation-id={image.correlation_id}", RESPONSE_STREAM)
        # A prototype keeps the response port open and needs no image; it has the least term.
        proto = sc.add_publication(f"{response}|response-correlation-id=prototype", RESPONSE_STREAM)
        assert proto.term_buffer_length == 64 * 1024
        plain_request.close()


def udp_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(5)
    return s


def frames(sock: socket.socket, frame_type: int, until: float) -> list[tuple[bytes, tuple]]:
    got = []
    while time.monotonic() < until:
        try:
            data, src = sock.recvfrom(65536)
        except TimeoutError:
            break
        if struct.unpack_from("<H", data, 6)[0] == frame_type:
            got.append((data, src))
    return got


def test_on_the_wire_setup_flag_rsp_setup_and_where_the_answer_goes(make_driver):
    """A Python socket stands for the client's driver: the request SETUP it gets answered carries flag 0x80,
    the server's request socket sends RSP_SETUP (20 bytes) naming the answer publication's session until that
    publication hears from the client, the answer publication sends nothing until a setup-eliciting status
    message arrives and then only to that message's source."""
    server_driver = make_driver(**OPTIONS)
    client_driver = make_driver(**OPTIONS)
    request_port, response_port = free_port(), free_port()
    request = f"aeron:udp?endpoint=127.0.0.1:{request_port}"
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{response_port}"
    with sulis.Client(dir=client_driver.dir) as cc, sulis.Client(dir=server_driver.dir) as sc:
        # 1. The client driver's request SETUP, caught on a fake server socket: flag 0x80.
        fake_server = udp_socket()
        rsp = cc.add_subscription(response, RESPONSE_STREAM)
        fake_port = fake_server.getsockname()[1]
        plain = cc.add_publication(f"aeron:udp?endpoint=127.0.0.1:{fake_port}", 7)
        req = cc.add_publication(f"aeron:udp?endpoint=127.0.0.1:{fake_port}|response-correlation-id="
                                 f"{rsp.registration_id}", REQUEST_STREAM)
        setups = frames(fake_server, 0x05, time.monotonic() + 1.0)
        flags = {struct.unpack_from("<i", d, 16)[0]: d[5] for d, _ in setups}
        assert flags == {7: 0x00, REQUEST_STREAM: 0x80}, flags
        plain.close(), req.close(), fake_server.close()

        # 2. A fake client against the real server: SETUP with 0x80 from the fake request socket.
        server = Server(sc, request, response)
        fake_req = udp_socket()
        session, term_id = 0x1234, 7
        setup = struct.pack("<iBBHiiiiiiii", 40, 0, 0x80, 0x05, 0, session, REQUEST_STREAM, term_id, term_id,
                            64 * 1024, 1408, 0)
        fake_req.sendto(setup, ("127.0.0.1", request_port))
        (answer,) = server.accept(1)
        # RSP_SETUP comes from the server's request socket, to the request's source, repeatedly.
        deadline = time.monotonic() + 2
        rsp_setups = frames(fake_req, 0x0B, deadline)
        assert len(rsp_setups) >= 3, rsp_setups
        for data, src in rsp_setups:
            assert len(data) == 20 and struct.unpack("<iBBHiii", data) == (
                20, 0, 0, 0x0B, session, REQUEST_STREAM, answer.session_id)
            assert src == ("127.0.0.1", request_port)
        # The answer publication has sent nothing anywhere yet; it answers the eliciting SM's source only.
        fake_rsp = udp_socket()
        sm = struct.pack("<iBBHiiiiiq", 36, 0, 0x80, 0x03, answer.session_id, RESPONSE_STREAM, 0, 0, 0, 99)
        fake_rsp.sendto(sm, ("127.0.0.1", response_port))
        (data, src), *_ = frames(fake_rsp, 0x05, time.monotonic() + 2) or [(None, None)]
        assert data is not None, "no SETUP from the answer publication"
        assert src == ("127.0.0.1", response_port)
        assert struct.unpack_from("<ii", data, 12) == (answer.session_id, RESPONSE_STREAM)
        # Once a status message connects the answer publication, RSP_SETUP stops.
        init_term = struct.unpack_from("<i", data, 20)[0]
        sm = struct.pack("<iBBHiiiiiq", 36, 0, 0, 0x03, answer.session_id, RESPONSE_STREAM, init_term, 0, 1 << 16, 99)
        fake_rsp.sendto(sm, ("127.0.0.1", response_port))
        await_until(lambda: answer.is_connected, 5, "answer publication connected")
        frames(fake_req, 0x0B, time.monotonic() + 0.3)  # what was on the way
        assert frames(fake_req, 0x0B, time.monotonic() + 0.5) == []
        for s in (fake_req, fake_rsp):
            s.close()


def test_through_a_relay_that_changes_the_client_source_port(make_driver):
    """The client's datagrams to the server's response port pass a relay (another source port, as behind a
    NAT): the answer publication sends to the relay, which brings the answers back."""
    server_driver = make_driver(**OPTIONS)
    client_driver = make_driver(**OPTIONS)
    request_port, response_port = free_port(), free_port()
    with RelayProcess(("127.0.0.1", response_port)) as relay:
        request = f"aeron:udp?endpoint=127.0.0.1:{request_port}"
        server_response = f"aeron:udp?control-mode=response|control=127.0.0.1:{response_port}"
        client_response = f"aeron:udp?control-mode=response|control=127.0.0.1:{relay.address[1]}"
        with sulis.Client(dir=server_driver.dir) as sc, sulis.Client(dir=client_driver.dir) as cc:
            server = Server(sc, request, server_response)
            pair = request_pair(cc, request, client_response)
            server.accept(1)
            await_until(lambda: pair[1].is_connected, 10, "response image through the relay")
            assert pair[1].images[0].source_identity == f"127.0.0.1:{relay.address[1]}"
            round_trip(server, [pair])
