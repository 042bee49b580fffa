"""Utilities for network tests: namespaces, nftables loss, a lossy UDP relay; and a disk that fills.

``netns``    ``NetnsPair`` (two namespaces on a veth), ``run_in`` / ``popen_in`` /
             ``call_in_netns`` / ``udp_socket_in``, ``require_netns``.
``nft``      ``NftLoss``: random UDP drop with counters, ``require_nft``.
``relay``    ``LossyRelay`` with per-direction ``Impairment`` and ``RelayStats``; ``RelayProcess``
             runs one in a child process.
``fixtures`` pytest fixtures ``netns_pair``, ``make_relay``, ``nft_loss``.
``disk``     ``small_ext4`` (a loop-mounted ext4 file system), ``fill``.
``procs``    ``threads_in`` (each thread's state, wait channel and kernel stack), ``KERNEL_STALL``.

The tests directory is on ``sys.path`` under pytest (as for ``conftest``), so
``from netutil import NetnsPair, NftLoss, LossyRelay, Impairment``.
"""

from .netns import (
    NetnsError,
    NetnsPair,
    call_in_netns,
    cleanup_stale,
    delete_netns,
    exec_prefix,
    list_netns,
    netns_available,
    popen_in,
    require_netns,
    run_in,
    udp_socket_in,
)
from .nft import NftError, NftLoss, nft_available, require_nft, run_nft
from .relay import BACKWARD, FORWARD, Impairment, LossyRelay, RelayProcess, RelayStats

__all__ = [
    "BACKWARD", "FORWARD", "Impairment", "LossyRelay", "RelayProcess", "NetnsError", "NetnsPair", "NftError", "NftLoss",
    "RelayStats", "call_in_netns", "cleanup_stale", "delete_netns", "exec_prefix", "list_netns",
    "netns_available", "nft_available", "popen_in", "require_netns", "require_nft", "run_in", "run_nft",
    "udp_socket_in",
]
