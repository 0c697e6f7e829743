"""The drill's processes: start, wait until ready, watch, stop; and the loopback-only network.

``Supervisor`` starts every process in a session of its own with its output in ``logs/<name>.log``, waits for
each one's readiness check, and stops them all in the reverse order (SIGTERM, then SIGKILL after a grace) when
the drill ends, fails or is interrupted: nothing it started outlives it. ``guard`` samples, through psutil,
every connection and listening socket of the started processes and of the drill itself: a connection to an
address outside 127.0.0.0/8 and ::1 fails the run. ``isolated`` re-executes the drill in a network namespace
of its own where only the loopback interface exists (``unshare``, util-linux), so nothing can leave even in
principle; KEDA's adapter binds its /metrics port on every interface (no flag chooses the address), and in that
namespace every interface is loopback.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import psutil

ISOLATED_ENV = "FORESCALE_DRILL_ISOLATED"


class DrillError(RuntimeError):
    """A drill cannot run (bad input, a missing build, a port taken, a part that did not start): the message
    says what and what to do; the CLI exits 2."""


def loopback(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack socket's view of 127.0.0.1
    return (mapped or ip).is_loopback


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def isolated() -> bool:
    return os.environ.get(ISOLATED_ENV) == "1"


def reexec_isolated(argv: Sequence[str]) -> int:
    """Run ``argv`` (this drill again) in a new network namespace with only ``lo`` up; returns its exit code.
    Raises DrillError when the namespace cannot be made (no unshare, no user namespaces)."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip") or "/usr/sbin/ip"
    if unshare is None or not Path(ip).exists():
        raise DrillError("the drill runs in a network namespace of its own: it needs `unshare` (util-linux) and "
                         "`ip` (iproute2); install them, or pass --no-isolate to run on this host's loopback")
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    probe = subprocess.run([unshare, *flags, ip, "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise DrillError(f"cannot make a network namespace ({probe.stderr.strip()[:200]}): run as root, enable "
                         f"unprivileged user namespaces, or pass --no-isolate")
    script = f'{ip} link set lo up && exec "$@"'
    env = {**os.environ, ISOLATED_ENV: "1"}
    return subprocess.call([unshare, *flags, "sh", "-c", script, "drill", *argv], env=env)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    peak_rss: int = 0

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 2000) -> str:
        try:
            data = self.log.read_bytes()[-n:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")


@dataclass
class Supervisor:
    """Starts and stops the drill's processes; samples their memory and connections."""

    logs: Path
    procs: list[Proc] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # connections that left 127.0.0.0/8, as "name: laddr -> raddr"
    wildcard: set[str] = field(default_factory=set)  # listening sockets bound to every interface, "name:port"
    retired: list[Proc] = field(default_factory=list)  # stopped on purpose (a scenario's event)

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> Proc:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        fh = open(log, "ab")
        try:
            popen = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        except OSError as e:
            raise DrillError(f"{name}: cannot start {argv[0]}: {e.strerror}") from None
        finally:
            fh.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def wait_ready(self, proc: Proc, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``check`` until it is true; the process dying or ``timeout`` seconds passing is a DrillError
        with the end of its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise DrillError(f"{proc.name} exited with {proc.popen.returncode} before {what}; the end of its "
                                 f"log ({proc.log}):\n{proc.tail()}")
            try:
                if check():
                    return
            except Exception:  # not up yet: connection refused, TLS not ready, 503 ...
                pass
            time.sleep(0.2)
        raise DrillError(f"{proc.name} not {what} after {timeout:.0f} s; the end of its log ({proc.log}):\n"
                         f"{proc.tail()}")

    def stop(self, proc: Proc, grace: float = 10.0) -> None:
        if proc.alive():
            try:
                os.killpg(proc.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # the whole session: helpers the process started go too
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def retire(self, proc: Proc) -> None:
        """Stop ``proc`` on purpose: it leaves the watched set (its log and peak RSS stay in ``retired``)."""
        self.stop(proc)
        if proc in self.procs:
            self.procs.remove(proc)
            self.retired.append(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)

    def sample(self) -> None:
        """One look at every live process: peak RSS (with its children) and the connections' far ends."""
        for proc in self.procs:
            if not proc.alive():
                continue
            try:
                p = psutil.Process(proc.popen.pid)
                members = [p, *p.children(recursive=True)]
                proc.peak_rss = max(proc.peak_rss, sum(m.memory_info().rss for m in members))
                for m in members:
                    self._check(proc.name, m.net_connections(kind="inet"))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        try:
            self._check("drill", psutil.Process().net_connections(kind="inet"))
        except psutil.Error:
            pass

    def _check(self, name: str, conns) -> None:
        for c in conns:
            if c.raddr and not loopback(c.raddr.ip):
                self.foreign.append(f"{name}: {c.laddr.ip}:{c.laddr.port} -> {c.raddr.ip}:{c.raddr.port}")
            if c.status == psutil.CONN_LISTEN and not loopback(c.laddr.ip):
                self.wildcard.add(f"{name}:{c.laddr.port}")


def python() -> str:
    return sys.executable
