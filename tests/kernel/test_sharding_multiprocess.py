"""The sharded batch scorer over a mesh spanning 2 processes (``jax.distributed``).

Two local processes with 4 CPU host devices each join one 8-device mesh through
``jax.distributed.initialize`` (gloo CPU collectives); each process places only its
own half of the rows. The answer must equal, bit for bit, the same scorer over 8
devices of one process, and the single-device ``score_batch``'s indices.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from support.paths import SRC, SUPPORT, TESTS

WORKER = SUPPORT / "sharding_worker.py"


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS)])
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_two_processes_score_exactly_as_one(tmp_path: Path) -> None:
    single_out = tmp_path / "single.npz"
    multi_out = tmp_path / "multi.npz"
    single = subprocess.run(
        [sys.executable, str(WORKER), "single", str(single_out)],
        env=_env(8), capture_output=True, text=True, timeout=300,
    )
    assert single.returncode == 0, single.stderr[-4000:]
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "multi", str(multi_out), str(i), str(port)],
            env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
    one = np.load(single_out)
    two = np.load(multi_out)
    assert int(two["processes"]) == 2
    assert int(two["devices"]) == 8 and int(two["local_devices"]) == 4
    assert int(one["devices"]) == 8
    # bit for bit: the same indices and the same score bytes
    assert np.array_equal(two["index"], one["index"])
    assert two["scores"].dtype == one["scores"].dtype
    assert two["scores"].tobytes() == one["scores"].tobytes()
    # and the single-device scorer's indices (its scores agree to rounding)
    assert np.array_equal(two["index"], one["single_index"])
    finite = np.isfinite(one["single_scores"])
    assert np.array_equal(np.isfinite(two["scores"]), finite)
    assert np.max(np.abs(two["scores"][finite] - one["single_scores"][finite])) <= 1e-6
    # the tied rows straddle the process boundary and rank lowest row first
    ties = [r for r in two["index"][0].tolist() if 996 <= r < 1004]
    assert len(ties) >= 6 and ties == sorted(ties)
