"""Who may use a Ray cluster that mtpbench starts or joins: the token its own cluster demands, the user's token
passed through to a cluster of theirs, and what can be seen of a cluster from here (does its GCS refuse a call
without a token, does it listen beyond loopback), said in one warning line by a run and by `doctor`.

Ray's token authentication (Ray >= 2.60, ray/_private/authentication/): with RAY_AUTH_MODE=token the GCS
refuses every gRPC call that lacks the header `authorization: Bearer <token>` (UNAUTHENTICATED, "Authentication
token is missing or incorrect"). A Ray process finds its token in RAY_AUTH_TOKEN, else in the file
RAY_AUTH_TOKEN_PATH names, else in ~/.ray/auth_token (C++ AuthenticationTokenLoader). mtpbench's own cluster
gets a fresh 256-bit token in the environment of its `ray start` only: the raylet hands its environment down
to its workers, and a process's environment is readable by its owner alone (/proc/<pid>/environ is 0400),
whereas a command line is readable by every user. The token is never on a command line, in a file or in a log.

Loopback keeps the network out, a token keeps out the machine's other users: on a shared GPU/NPU server any
of them can reach 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray binds a node to the address it is given
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp{,6} for a listening socket
PROBE_S = 10.0  # the most one look at a cluster's GCS may take


def new_token() -> str:
    """A fresh token for one cluster: 256 random bits, as `ray get-auth-token --generate` makes them."""
    return secrets.token_hex(32)


def token_env(token: str) -> dict[str, str | None]:
    """The variables that make a Ray process demand (a node) or present (a driver) `token`; None unsets: a
    token file named by the user must not stand in for the cluster's own token."""
    return {AUTH_MODE_ENV: "token", TOKEN_ENV: token, TOKEN_PATH_ENV: None}


def cluster_env(base: Mapping[str, str], token: str) -> dict[str, str]:
    """The environment of the `ray start` of a cluster mtpbench starts: `base` without an address to join,
    bound to the address it is given (loopback) and demanding `token`."""
    env = {key: value for key, value in base.items() if key != "RAY_ADDRESS"}
    env[LOOPBACK_ENV] = "0"
    for key, value in token_env(token).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def driver_env(updates: Mapping[str, str | None]) -> Callable[[], None]:
    """Set (None: unset) Ray's authentication variables in this process and make its Ray read them again;
    returns what puts them back. Ray reads them once, into its C++ config and a token cache."""
    old = {key: os.environ.get(key) for key in updates}
    _set_environ(updates)
    _reload_ray_auth()

    def restore() -> None:
        _set_environ(old)
        _reload_ray_auth()

    return restore


def _set_environ(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _reload_ray_auth() -> None:
    from ray._raylet import AuthenticationTokenLoader, Config

    # The config first, then the cache (ray/_private/authentication_test_utils.py reset_auth_token_state: a
    # gRPC thread still draining must not reload a token under a config that still says token mode).
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def user_token() -> str | None:
    """The token this user's Ray would present (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token), or
    None; read by Ray's own loader, so its order and its file format are Ray's."""
    from ray._raylet import AuthenticationTokenLoader

    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()
    if not loader.has_token(ignore_auth_mode=True):
        return None
    return str(loader.get_raw_token(ignore_auth_mode=True))


class GcsAnswer(Enum):
    """What a Ray GCS says to one call."""

    LET_IN = "let in"
    REFUSED = "refused"  # it demands a token this call lacks (or a token it does not hold)
    SILENT = "silent"  # no answer in time, or not a GCS


def gcs_answer(address: str, token: str | None = None, timeout_s: float = PROBE_S) -> GcsAnswer:
    """What the GCS at HOST:PORT says to a call that carries `token` (None: no token). A plain gRPC channel:
    the call carries exactly what is given, not whatever token this process's Ray would add."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            return GcsAnswer.REFUSED if exc.code() == grpc.StatusCode.UNAUTHENTICATED else GcsAnswer.SILENT
    return GcsAnswer.LET_IN


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of this machine (its network namespace), from /proc/net/tcp{,6}."""

    host: str
    port: int
    inode: int

    @property
    def on_loopback(self) -> bool:
        ip = ipaddress.ip_address(self.host)
        mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is loopback, though ipaddress says no
        return ip.is_loopback or (mapped is not None and mapped.is_loopback)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _proc_address(text: str) -> tuple[str, int]:
    """`0100007F:1F90` (/proc/net/tcp: the address as the kernel stores it, 32-bit words in host order, and
    the port in hex) as ("127.0.0.1", 8080)."""
    hex_host, hex_port = text.split(":")
    raw = bytes.fromhex(hex_host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host order: little-endian here
    ip = ipaddress.ip_address(words)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (f"::ffff:{mapped}" if mapped is not None else str(ip)), int(hex_port, 16)


def listeners(pids: Iterable[int] | None = None) -> list[Listener]:
    """The listening TCP sockets of this machine, or of `pids` only (matched by the sockets' inodes among
    their open files: a process of another user hides its files, and its sockets then do not count)."""
    found: list[Listener] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:  # no IPv6 on this machine
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                host, port = _proc_address(fields[1])
                found.append(Listener(host, port, int(fields[9])))
    if pids is None:
        return found
    owned = _socket_inodes(pids)
    return [listener for listener in found if listener.inode in owned]


def _socket_inodes(pids: Iterable[int]) -> set[int]:
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # gone, or not ours
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _resolves_to_loopback(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(Listener(str(info[4][0]).split("%")[0], port, 0).on_loopback for info in infos)


def exposure(host: str, port: int) -> str | None:
    """Why the GCS at host:port is reachable beyond loopback, or None: named by an address that is not
    loopback, or listening on one (0.0.0.0 is every interface) though named by 127.0.0.1."""
    if not _resolves_to_loopback(host, port):
        return f"its GCS is reached at {host}, beyond loopback"
    wide = [str(listener) for listener in listeners() if listener.port == port and not listener.on_loopback]
    return f"its GCS listens on {wide[0]}, beyond loopback" if wide else None


@dataclass(frozen=True)
class ClusterSafety:
    """What can be seen from here of a named cluster: whether its GCS demands a token, how it is exposed."""

    address: str
    demands_token: bool | None  # None: the GCS did not answer the look, or the address is not HOST:PORT
    exposed: str | None

    def warning(self) -> str | None:
        """The one line a run and `doctor` print about a cluster that anyone may use, or None."""
        problems = []
        if self.demands_token is False:
            problems.append("runs without token authentication (RAY_AUTH_MODE=token)")
        if self.exposed:
            problems.append(self.exposed)
        if not problems:
            return None
        return (
            f"the Ray cluster at {self.address} {' and '.join(problems)}: whoever reaches it runs code as the "
            "user who started it (docs/parallel.md shows the safe set-up)"
        )


def assess(address: str, host: str, port: int) -> ClusterSafety:
    """Look at the cluster at `address` (HOST:PORT, split as host and port) without joining it."""
    demands = {GcsAnswer.REFUSED: True, GcsAnswer.LET_IN: False}.get(gcs_answer(address))
    return ClusterSafety(address, demands, exposure(host, port))


__all__ = [
    "AUTH_MODE_ENV",
    "LOOPBACK_ENV",
    "TOKEN_ENV",
    "TOKEN_PATH_ENV",
    "ClusterSafety",
    "GcsAnswer",
    "Listener",
    "assess",
    "cluster_env",
    "driver_env",
    "exposure",
    "gcs_answer",
    "listeners",
    "new_token",
    "token_env",
    "user_token",
]
