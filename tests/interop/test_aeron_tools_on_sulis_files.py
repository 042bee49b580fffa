"""Aeron's own tools on a sulis driver's files: ``AeronStat`` and ``ErrorStat`` read its CnC file's counters and
error log, and ``io.aeron.samples.LossStat`` reads ``loss-report.dat``, whose
entries sulis lays out as Aeron does (the source after the channel padded to 4 bytes: a channel whose length is
not a multiple of 4, as every ``aeron:udp?endpoint=127.0.0.1:PPPPP`` is, once made LossStat fail with an
IndexOutOfBoundsException). Skipped only when Java or Aeron's jar is missing (``bash bench/peers/install.sh``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import peers
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "system"))
from test_udp_system import free_port, run_stream, stream_of, udp_pair  # noqa: E402

import sulis  # noqa: E402

pytestmark = pytest.mark.interop


def aeron_tool(aeron: peers.AeronJava, tool: str, driver_dir: str) -> str:
    """What Aeron's sample ``tool`` prints about the driver in ``driver_dir``."""
    out = subprocess.run([aeron.java, *peers.aeron_java.ADD_OPENS, f"-Daeron.dir={driver_dir}", "-cp", aeron.jar,
                          f"io.aeron.samples.{tool}"],
                         capture_output=True, text=True, timeout=peers.JVM_START_S)
    assert out.returncode == 0, f"{tool}: {out.stderr[-2000:]}"
    return out.stdout


def test_aerons_loss_stat_reads_the_loss_a_sulis_driver_reported(make_driver, make_client):
    aeron = peers.usable("current")
    port = free_port()  # a 5-digit port: a 34-character channel, not a multiple of 4
    sub_driver, _, sub, pub = udp_pair(make_driver, make_client, port=port,
                                       pub_opts={"send_data_loss": "every:10:3"})
    run_stream(pub, sub, stream_of(2_000, seed=3), 2_000)
    (entry,) = sulis.read_loss_report(sub_driver.dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    assert entry["channel"] == channel and len(channel) % 4 != 0
    lines = [line for line in aeron_tool(aeron, "LossStat", sub_driver.dir).splitlines() if channel in line]
    assert len(lines) == 1, lines
    fields = lines[0].split(",")
    # #OBSERVATIONS,TOTAL_BYTES_LOST,FIRST_OBSERVATION,LAST_OBSERVATION,SESSION_ID,STREAM_ID,CHANNEL,SOURCE
    assert [int(f) for f in fields[:2]] == [entry["observation_count"], entry["total_bytes_lost"]], lines
    assert (int(fields[4]), int(fields[5])) == (entry["session_id"], entry["stream_id"]), lines
    assert fields[-1] == entry["source"], lines


@pytest.mark.expect_errors
def test_aerons_error_stat_and_aeron_stat_read_a_sulis_driver(make_driver, make_client):
    """``ErrorStat`` prints the error a sulis driver logged (the one ``sulis errors`` shows), and ``AeronStat``
    the driver's counters by the labels and values sulis's own reader gives."""
    aeron = peers.usable("current")
    driver = make_driver()
    client = make_client(dir=driver.dir)
    with pytest.raises(sulis.ConfigurationError):
        client.add_publication("aeron:udp?endpoint=nowhere.invalid:40000", 1)
    errors = aeron_tool(aeron, "ErrorStat", driver.dir)
    assert "1 distinct errors observed." in errors and "cannot resolve host" in errors, errors
    stat = subprocess.Popen([aeron.java, *peers.aeron_java.ADD_OPENS, f"-Daeron.dir={driver.dir}", "-cp",
                             aeron.jar, "io.aeron.samples.AeronStat"], stdout=subprocess.PIPE, text=True)
    try:  # it prints the counters every second until stopped: the first screen is enough
        lines: list[str] = []
        while not any("Errors" in line for line in lines):
            line = stat.stdout.readline()
            assert line, f"AeronStat ended: {''.join(lines)}"
            lines.append(line)
    finally:
        stat.kill()
        stat.wait(timeout=30)
        stat.stdout.close()
    shown = {line.split(" - ", 1)[1].strip(): int(line.split(":")[1].split(" - ")[0].replace(",", ""))
             for line in lines if " - " in line and line.split(":")[0].strip().isdigit()}
    reader = sulis.CountersReader(driver.dir)
    ours = {reader.label(c["id"]): c["value"] for c in reader.counters()}
    assert shown["Errors"] == ours["Errors"] >= 1, (shown, ours)
    assert set(shown) <= set(ours), set(shown) - set(ours)


def test_aerons_client_takes_a_sulis_driver_for_protocol_1_and_asks_it_for_session_ids(make_driver):
    """System counters carry their own id as registration id and no owner, as Aeron's driver's do, so Aeron's
    client reads the control protocol version (1.0.0) and sends GET_NEXT_AVAILABLE_SESSION_ID for
    ``Aeron.nextSessionId``: the driver answers with its ids in turn and the next publication takes the one
    after (on a protocol-0 driver the client would make up random ids itself)."""
    aeron = peers.usable("current")
    driver = make_driver()
    reader = sulis.CountersReader(driver.dir)
    version = next(c for c in reader.counters() if c["id"] == 43)
    assert (version["registration_id"], version["owner_id"], version["value"]) == (43, -1, 1 << 16), version
    cmd = peers.aeron_java.peer(aeron, "session-ids", {"aeron.dir": driver.dir}, stream=4321)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=peers.JVM_START_S)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    a, b = r["next"]
    step = lambda x, y: (y - x) & 0xFFFF_FFFF  # noqa: E731 (ids wrap at 2^31)
    assert (step(a, b), step(b, r["publication"])) == (1, 1), r
