"""Every Python snippet in README.md and docs/*.md runs, as a reader would run it, and does what the
text around it says. A snippet that is a fragment (it uses a ``client`` or ``spark`` made earlier)
runs after the few lines that make them (``PRELUDE``); one that names a host or a directory of the
reader's runs with a place of the test's own (``REPLACE``). A new snippet fails
``test_every_snippet_is_run`` until it is given a way to run here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sulis
from conftest import CLI, await_until, clean_env, make_dir

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Snippet:
    starts: str  # the snippet's first line, which names it
    prelude: str = ""  # makes what a fragment uses
    replace: dict[str, str] = field(default_factory=dict)  # the reader's places -> the test's ({tmp}: a directory)
    expect: str = ""  # a regular expression its output matches
    spark: bool = False
    with_driver: bool = False  # a `sulis driver` runs in $SULIS_DIR (the snippet is a client of it)


_LOCAL_DRIVER = ("import sulis\n"
                 "driver = sulis.MediaDriver(threading_mode='shared')\n"
                 "client = sulis.Client(dir=driver.dir)\n")
_ARCHIVE = ("import sulis\n"
            "driver = sulis.MediaDriver(threading_mode='shared')\n"
            "archive_node = sulis.Archive('{tmp}/archive', driver_dir=driver.dir)\n"
            "driver_dir = driver.dir\n"
            "handler = lambda buffer, header: None\n")
_SPARK = ("import os, sys\n"
          "os.environ.update(SPARK_LOCAL_IP='127.0.0.1', PYSPARK_PYTHON=sys.executable)\n"
          "from pyspark.sql import SparkSession\n"
          "import sulis\n"
          "driver = sulis.MediaDriver(threading_mode='shared')\n"
          "archive_node = sulis.Archive('{tmp}/archive', driver_dir=driver.dir)\n"
          "spark = SparkSession.builder.master('local[2]').config('spark.ui.enabled', 'false').getOrCreate()\n"
          "spark.sparkContext.setLogLevel('ERROR')\n")

# A free UDP port on loopback, as a string: for the members' endpoints a snippet leaves to the test.
_FREE_PORT = ("import socket\n"
              "def _free():\n"
              "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              "    s.bind(('127.0.0.1', 0))\n"
              "    port = s.getsockname()[1]\n"
              "    s.close()\n"
              "    return str(port)\n")

_CLUSTER = (_FREE_PORT
            + "import sulis\n"
            "from sulis.cluster import ClusterClient, ClusterNode, ClusteredService\n"
            "driver = sulis.MediaDriver(threading_mode='shared')\n"
            "driver_dir = driver.dir\n"
            "archive_node = sulis.Archive('{tmp}/archive', driver_dir=driver_dir)\n"
            "members = ('0,localhost:{port},localhost:' + _free() + ',localhost:' + _free()\n"
            "           + ',localhost:0,localhost:8010')\n"
            "node = ClusterNode(ClusteredService(), '{tmp}/cluster', driver_dir, cluster_members=members,\n"
            "                   log_term_length='64k', max_concurrent_sessions=50)\n")

# A one-member cluster whose service echoes each message, its ingress on {port}: for a client snippet.
_CLUSTER_ECHO = (_FREE_PORT
                 + "import sulis\n"
                 "from sulis.cluster import OFFER_AGAIN, ClusterNode, ClusteredService\n"
                 "class _Echo(ClusteredService):\n"
                 "    def on_session_message(self, cluster, session_id, timestamp, payload):\n"
                 "        while cluster.offer(session_id, payload) in OFFER_AGAIN:\n"
                 "            cluster.idle()\n"
                 "driver = sulis.MediaDriver(threading_mode='shared')\n"
                 "archive_node = sulis.Archive('{tmp}/archive', driver_dir=driver.dir)\n"
                 "node = ClusterNode(_Echo(), '{tmp}/cluster', driver.dir, log_term_length='64k',\n"
                 "                   cluster_members='0,localhost:{port},localhost:' + _free() + ',localhost:0,"
                 "localhost:0,localhost:0')\n")

# A driver holding a keyring of one fresh key, and a client of it: for the transport security snippet.
_SECURED = ("import os, secrets\n"
            "import sulis\n"
            "fd = os.open('{tmp}/keyring', os.O_WRONLY | os.O_CREAT, 0o600)\n"
            "os.write(fd, ('1 ' + secrets.token_hex(32) + '\\n').encode())\n"
            "os.close(fd)\n"
            "driver = sulis.MediaDriver(threading_mode='shared', keyring_file='{tmp}/keyring')\n"
            "client = sulis.Client(dir=driver.dir)\n")

#: Each snippet, by file and order in it.
SNIPPETS: dict[tuple[str, int], Snippet] = {
    # The message, always; "joined ..." comes from the client's callback thread, which may not have run
    # before the example ends.
    ("README.md", 0): Snippet("import sulis", expect=r"b'hello' at 64"),
    ("README.md", 1): Snippet("import threading"),
    # 2 and 3, the subscriber and the publisher: test_the_readme_subscriber_receives_what_its_publisher_sends
    ("README.md", 4): Snippet("# host B (10.0.0.2): receives", prelude=_LOCAL_DRIVER,
                              replace={"10.0.0.2:40123": "127.0.0.1:{port}"}),
    ("README.md", 5): Snippet("# every host, publisher and receivers alike", prelude=_LOCAL_DRIVER,
                              replace={"40456|interface=10.0.0.0/24": "{port}|interface=127.0.0.1"}),
    ("README.md", 6): Snippet("# dynamic: publisher on 10.0.0.1, receivers each on their own address",
                              prelude=_LOCAL_DRIVER,
                              replace={"10.0.0.1:40457": "127.0.0.1:{port}", "10.0.0.2:40458": "127.0.0.2:{port}",
                                       "10.0.0.2:40459": "127.0.0.3:{port}", "10.0.0.2:40460": "127.0.0.4:{port}"}),
    ("README.md", 7): Snippet("with sulis.MediaDriver() as driver, \\", replace={"/var/tmp/archive": "{tmp}/archive"},
                              prelude="import sulis\n"),
    ("README.md", 8): Snippet("import tempfile", replace={"localhost:9010": "localhost:{port}"},
                              expect=r"\[b'5', b'12'\]"),
    ("README.md", 9): Snippet("import sulis.spark", prelude=_SPARK, spark=True),
    ("docs/security.md", 0): Snippet('channel = "aeron:udp?endpoint=10.0.0.2:40123|security=encrypt"',
                                     prelude=_SECURED, replace={"10.0.0.2:40123": "127.0.0.1:{port}"}),
    ("docs/archive.md", 0): Snippet("with sulis.Client(dir=driver_dir) as client, sulis.ArchiveClient(client) as "
                                    "archive:", prelude=_ARCHIVE, replace={"localhost:40123": "localhost:{port}"},
                                    expect=r"\d+ 0 -?\d+ aeron:udp\?endpoint=localhost:\d+"),
    ("docs/spark.md", 0): Snippet("import sulis.spark", prelude=_SPARK, spark=True),
    # The getting-started page's service and client: the service module imports and defines its class; the client
    # gets an echo from a one-member cluster of this test's. tests/system/test_cluster_start_doc.py runs both as
    # the page does, through `sulis cluster-node` processes.
    ("docs/cluster-start.md", 0): Snippet("# echo.py: a service that answers every message with itself"),
    ("docs/cluster-start.md", 1): Snippet("# client.py: sends one message to the cluster and prints the service's "
                                          "answer", prelude=_CLUSTER_ECHO,
                                          replace={"0=localhost:9010": "0=localhost:{port}"},
                                          expect=r"member 0 answered b'hello'"),
    # A one-member cluster of this test's; 20 sessions on the shared client rather than 1,000.
    ("docs/cluster.md", 0): Snippet("with sulis.Client(dir=driver_dir) as shared:", prelude=_CLUSTER,
                                    replace={"0=host:9010": "0=localhost:{port}", "range(1000)": "range(20)"}),
    # The query is made, not started (tests/system/test_spark_cluster_log_system.py reads real members' logs).
    ("docs/spark.md", 1): Snippet("# A member runs on this host: sulis cluster-node ... --cluster-dir "
                                  "/data/member-0/cluster --dir /data/member-0/driver", prelude=_SPARK, spark=True,
                                  replace={"/data/member-0": "{tmp}/member-0"},
                                  expect=r"cluster_session_id: long.*\n.*leadership_term_id: long"),
    # The JVM source: a Spark JVM of its own, started with the jar (the test skips the snippet without one).
    ("docs/spark.md", 2): Snippet("spark = (SparkSession.builder.master(\"local[2]\")",
                                  prelude=("import os, sys\n"
                                           "os.environ.update(SPARK_LOCAL_IP='127.0.0.1',\n"
                                           "                  PYSPARK_PYTHON=sys.executable)\n"
                                           "from pyspark.sql import SparkSession\n"
                                           "import sulis.spark\n"),
                                  expect=r"value: binary.*\n.*recording_id: long"),
    # The JVM sink in real-time mode: the query starts (and reads nothing yet: nothing is recorded).
    ("docs/spark.md", 3): Snippet("# spark: a session with .config(\"spark.jars\", sulis.spark.jar())",
                                  prelude=("import os, sys\n"
                                           "os.environ.update(SPARK_LOCAL_IP='127.0.0.1',\n"
                                           "                  PYSPARK_PYTHON=sys.executable)\n"
                                           "from pyspark.sql import SparkSession\n"
                                           "import sulis, sulis.spark\n"
                                           "driver = sulis.MediaDriver(threading_mode='shared')\n"
                                           "archive_node = sulis.Archive('{tmp}/archive', driver_dir=driver.dir)\n"
                                           "spark = (SparkSession.builder.master('local[2]')\n"
                                           "         .config('spark.jars', sulis.spark.jar())\n"
                                           "         .config('spark.sql.streaming.realTimeMode.allowlistCheck',"
                                           " 'false').getOrCreate())\n"),
                                  replace={"/tmp/ck": "{tmp}/ck"}),
}
PAIR = {("README.md", 2): "# subscriber.py", ("README.md", 3): "# publisher.py"}


def snippets() -> dict[tuple[str, int], str]:
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(path.relative_to(ROOT))
        for i, m in enumerate(BLOCK.finditer(path.read_text())):
            found[(name, i)] = m.group(1)
    return found


def test_every_snippet_is_run():
    found = snippets()
    known = {**{k: s.starts for k, s in SNIPPETS.items()}, **PAIR}
    assert found.keys() == known.keys(), (f"snippets without a way to run here: {sorted(found.keys() - known.keys())}; "
                                          f"gone: {sorted(known.keys() - found.keys())}")
    for key, text in found.items():
        assert text.splitlines()[0] == known[key], f"{key} now starts {text.splitlines()[0]!r}, not {known[key]!r}"


def _run(code: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def _placed(key, places: dict[str, str]) -> str:
    """The snippet's text with the reader's places replaced by the test's."""
    text = snippets()[key]
    for old, new in SNIPPETS[key].replace.items():
        assert old in text, f"{key}: {old!r} is no longer in the snippet"
        text = text.replace(old, new.format(**places))
    return text


@pytest.mark.parametrize("key", sorted(k for k, s in SNIPPETS.items() if not s.spark), ids=lambda k: f"{k[0]}#{k[1]}")
def test_a_snippet_runs(key):
    from conftest import free_udp_port

    snippet = SNIPPETS[key]
    if "JVM_FORMAT" in snippets()[key]:
        import sulis.spark

        if not os.path.exists(sulis.spark.jar()):
            pytest.skip("no sulis jar (scripts/build_jar.sh builds it; it needs a JDK 17)")
    tmp = tempfile.mkdtemp(prefix="sulis-snippet-")
    places = {"tmp": tmp, "port": str(free_udp_port())}
    env = clean_env(SULIS_DIR=make_dir("sulis-snippet-"))
    try:
        result = _run(snippet.prelude.format(**places) + _placed(key, places), env, timeout=170)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert result.returncode == 0, f"{key} failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    assert re.search(snippet.expect, result.stdout), f"{key} printed {result.stdout!r}, not /{snippet.expect}/"


def test_the_spark_snippets_run():
    """The Spark snippets, as a reader runs them in one notebook: one Spark application (its start is
    most of a snippet's time), each snippet in a namespace of its own made by the prelude, one after
    another; a failure's traceback names the snippet (its file and number)."""
    pytest.importorskip("pyspark")
    keys = sorted(k for k, s in SNIPPETS.items() if s.spark)
    assert {SNIPPETS[k].prelude for k in keys} == {_SPARK}, "the Spark snippets share one prelude"
    tmp = tempfile.mkdtemp(prefix="sulis-snippet-")
    places = {"tmp": tmp, "port": "0"}
    code = _SPARK.format(**places) + "_made = dict(globals())\n"
    for key in keys:
        name = f"{key[0]}#{key[1]}"
        code += (f"print({name!r} + ' runs', flush=True)\n"
                 f"exec(compile({_placed(key, places)!r}, {name!r}, 'exec'), dict(_made))\n")
    env = clean_env(SULIS_DIR=make_dir("sulis-snippet-"))
    try:
        result = _run(code, env, timeout=230)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert result.returncode == 0, f"the Spark snippets failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    for key in keys:
        assert f"{key[0]}#{key[1]} runs" in result.stdout
        assert re.search(SNIPPETS[key].expect, result.stdout), f"{key} printed {result.stdout!r}"


def test_the_readme_subscriber_receives_what_its_publisher_sends():
    """The README's subscriber.py and publisher.py, with `sulis driver` running: the subscriber prints
    the hundred messages in order (it runs until Ctrl-C: the test ends it)."""
    found = snippets()
    subscriber, publisher = found[("README.md", 2)], found[("README.md", 3)]
    env = clean_env(SULIS_DIR=make_dir("sulis-snippet-"))
    driver = subprocess.Popen([*CLI, "driver", "--threading-mode", "shared"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    sub = None
    try:
        cnc = os.path.join(env["SULIS_DIR"], sulis.CNC_FILE)
        await_until(lambda: os.path.exists(cnc), timeout=20, what="the driver")
        with tempfile.TemporaryFile("w+") as out:
            # No wait for the subscriber: either may start first (the README says so, and the publisher
            # offers until one is connected).
            sub = subprocess.Popen([sys.executable, "-u", "-c", subscriber], env=env, stdout=out,
                                   stderr=subprocess.PIPE, text=True)
            result = _run(publisher, env, timeout=60)
            assert result.returncode == 0, result.stderr

            def received():
                # pread: the subscriber shares this file's offset, so a seek here moved where it wrote
                # next (its later lines overwrote the first ones, now and then).
                size = os.fstat(out.fileno()).st_size
                return os.pread(out.fileno(), size, 0).decode().splitlines()

            await_until(lambda: len(received()) >= 100, timeout=20,
                        what=lambda: f"the subscriber to print 100 messages (it printed {len(received())}: "
                                     f"{received()[:2]} .. {received()[-2:]}; publisher: {result.stdout!r} "
                                     f"{result.stderr!r})")
            assert received() == [f"message {i}" for i in range(100)]
    finally:
        for p in (sub, driver):
            if p is not None:
                p.terminate()
                p.wait(10)
                assert p.stderr is not None
                p.stderr.close()
