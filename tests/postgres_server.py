"""A PostgreSQL cluster for the tests, from the machine's own binaries (`initdb`, `pg_ctl`).

`PostgresCluster.start()` makes a cluster in a new directory, listening on 127.0.0.1 on a
free port only (no Unix socket), with a password (scram-sha-256) that the session's secret
scan looks for; `database()` makes a fresh database and gives its DSN; `stop()` stops the
server and removes the directory. One cluster per test worker (a session fixture).

`initdb` refuses to run as root, and CI runs as root: there, every server program runs as
the unprivileged user `nobody`, through `runuser` (or `setpriv` where it is missing), in a
directory that user owns.

Where the binaries are: `$X402_EUR_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
(Debian's package: `make postgresql` installs it), else `initdb` on PATH.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["INSTALL", "PostgresCluster", "server_bin"]

INSTALL = "make postgresql (apt-get install postgresql)"
USER = "x402"
UNPRIVILEGED = "nobody"


def server_bin() -> Path | None:
    """The directory of `initdb` and `pg_ctl`, or None when PostgreSQL is not installed."""
    given = os.environ.get("X402_EUR_PG_BIN")
    if given:
        return Path(given)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name.split(".")[0]),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def as_unprivileged(command: list[str]) -> list[str]:
    """`command`, run as `nobody` when this process is root (initdb refuses root)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", UNPRIVILEGED, "--", *command]
    return [
        "setpriv",
        f"--reuid={UNPRIVILEGED}",
        f"--regid={UNPRIVILEGED}",
        "--clear-groups",
        *command,
    ]


class PostgresCluster:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.password = "pg-" + secrets.token_urlsafe(18)
        # Not under pytest's temporary directory: `nobody` cannot enter root's.
        self.root = Path(tempfile.mkdtemp(prefix="x402-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self._databases = 0

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            as_unprivileged([str(self.bindir / command[0]), *command[1:]]),
            capture_output=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{command[0]} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-2000:]}{tail}"
            )

    def start(self) -> PostgresCluster:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            user = pwd.getpwnam(UNPRIVILEGED)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        self.root.chmod(0o700)
        pwfile.chmod(0o600)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        pwfile.unlink()
        for attempt in range(5):
            self.port = _free_port()
            options = (
                f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
                    "-o", options, "-w", "-t", "60", "start",
                )  # fmt: skip
                return self
            except RuntimeError:
                if attempt == 4:
                    raise
        return self

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database; its DSN."""
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}_{secrets.token_hex(3)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
