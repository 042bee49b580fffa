"""The benchmark harness of sulis, one layer for ``sulis bench`` and the repository's bench/
(bench/README.md, "How the harness is built"):

* ``loops``: the measured loops, the only timed code;
* ``hist``: HdrHistograms of round trips and the figures read from them;
* ``procs``: child processes that die with us and speak JSON lines, scratch directories, ports,
  CPU pins, the CPU other processes took;
* ``roles``: one side of an exchange in a process of its own (``python -m sulis._benchkit.roles``):
  sulis, pyzmq, plain sockets, zenoh, iceoryx2;
* ``runner``: pairs of roles run, rounds, options, and ``compare``, which runs a benchmark's table;
* ``report``: medians, tables, targets, the JSON record.
"""
