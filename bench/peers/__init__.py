"""Peer systems (Aeron Java, pyzmq) that sulis benchmarks print their figures beside.

``bash bench/peers/install.sh`` installs them; see README.md in this directory.
"""
