"""A real one-node SLURM cluster for the SLURM tests, started as root in a temp dir.

Why: the cluster profile (slurm/) is only worth something if Snakemake's SLURM executor really
submits, tracks and retries jobs with it. A one-node cluster (munged + slurmctld + slurmd on this
host, no accounting database) is enough for that. Without slurmdbd there is no sacct, so the
executor must poll with squeue (``--slurm-status-command squeue``), and MinJobAge is long so that
finished jobs stay visible to squeue.

Only the daemons started here are stopped at teardown, each by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
STATUS_OPTION = ("--slurm-status-command", "squeue")
# .ci/run sets it: there a missing SLURM is a failure, not a skip.
REQUIRE_ENV = "ANCHORMASK_REQUIRE_SLURM"


@dataclass
class SlurmCluster:
    """What a test needs to talk to the cluster: the environment for clients and the conf."""

    root: Path
    conf: Path
    env: dict[str, str]
    node: str
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *args: str) -> str:
        return subprocess.run(list(args), env=self.env, check=True, capture_output=True, text=True).stdout


def _find(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}")
                                      if os.access(p, os.X_OK)), None)


def _memory_mb() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def _slurm_conf(root: Path, node: str, cpus: int, memory_mb: int, munge_socket: Path,
                ports: tuple[int, int]) -> str:
    return "\n".join([
        "ClusterName=anchormask",
        f"SlurmctldHost={node}",
        f"AuthInfo=socket={munge_socket}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "MinJobAge=3600",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "Waittime=0",
        f"NodeName={node} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=main Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
        "",
    ])


def _wait(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"timed out waiting for {what}\n{tail}")


def _pid_from(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _free_ports(n: int) -> tuple[int, ...]:
    """Ports nobody listens on now: a second cluster (another test session) must not collide."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("", 0))
        return tuple(sock.getsockname()[1] for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _srun_wrapper(root: Path, conf: Path) -> Path:
    """A bin dir whose `srun` sets SLURM_CONF before calling the real one.

    Why: snakemake-executor-plugin-slurm-jobstep drops every SLURM_* variable but a few job ids
    from the environment of its inner `srun` (SLURM_CONF included), so on a cluster whose
    slurm.conf is not at the compiled-in default path the job step cannot find its config.
    PATH survives, so a wrapper first on PATH restores it. Real clusters keep their conf at
    the default path and need nothing of this.
    """
    bindir = root / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "srun"
    wrapper.write_text(f"#!/bin/sh\nSLURM_CONF={conf} exec {shutil.which('srun')} \"$@\"\n")
    wrapper.chmod(0o755)
    return bindir


def _unavailable(why: str) -> None:
    """Skip, or fail where the cluster is required: CI must not pass by skipping the SLURM tests."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1 requires the SLURM tests to run)")
    pytest.skip(why)


def start_cluster(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd on this host; skip the test when that is impossible."""
    if os.geteuid() != 0:
        _unavailable("the one-node SLURM cluster needs root")
    missing = [d for d in DAEMONS if _find(d) is None]
    missing += [c for c in ("sbatch", "squeue", "sinfo", "scontrol") if shutil.which(c) is None]
    if missing:
        _unavailable(f"SLURM/munge not installed (missing {', '.join(missing)}): "
                     "apt-get install -y slurm-wlm munge")
    node = socket.gethostname().split(".")[0]
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(exist_ok=True)
    os.chmod(root / "munge", 0o700)
    # A key of our own: nothing outside `root` is read or written, and no system munged is needed.
    munge_key = root / "munge" / "munge.key"
    munge_key.write_bytes(os.urandom(1024))
    os.chmod(munge_key, 0o400)
    munge_socket = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, node, os.cpu_count() or 1, _memory_mb(), munge_socket, _free_ports(2)))
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{_srun_wrapper(root, conf)}:{os.environ['PATH']}"}
    cluster = SlurmCluster(root=root, conf=conf, env=env, node=node)
    try:
        subprocess.run([_find("munged"), "--force", f"--key-file={munge_key}", f"--socket={munge_socket}",
                        f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge' / 'munged.log'}",
                        f"--seed-file={root / 'munge' / 'munged.seed'}"], check=True, env=env,
                       capture_output=True, text=True)
        _wait(lambda: _pid_from(root / "munge" / "munged.pid") is not None, 10, "munged pid file")
        cluster.pids["munged"] = _pid_from(root / "munge" / "munged.pid")
        # -i: ignore (absent) saved state; both daemons fork into the background and write pid files.
        subprocess.run([_find("slurmctld"), "-f", str(conf), "-i"], check=True, env=env,
                       capture_output=True, text=True)
        _wait(lambda: _pid_from(root / "slurmctld.pid") is not None, 20, "slurmctld pid file",
              root / "slurmctld.log")
        cluster.pids["slurmctld"] = _pid_from(root / "slurmctld.pid")
        subprocess.run([_find("slurmd"), "-f", str(conf)], check=True, env=env, capture_output=True, text=True)
        _wait(lambda: _pid_from(root / "slurmd.pid") is not None, 20, "slurmd pid file", root / "slurmd.log")
        cluster.pids["slurmd"] = _pid_from(root / "slurmd.pid")

        def idle() -> bool:
            proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True)
            return proc.returncode == 0 and f"{node} idle" in proc.stdout

        _wait(idle, 60, "the node to become idle", root / "slurmctld.log")
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: SlurmCluster) -> None:
    """Stop exactly the daemons this module started (by PID), slurmd first."""
    for name in ("slurmd", "slurmctld", "munged"):
        pid = cluster.pids.pop(name, None)
        if pid is None or not _alive(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            try:  # reap when it is our child (it is not after a daemon fork, so this may fail)
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node cluster for the session; SLURM_CONF is in cluster.env."""
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
