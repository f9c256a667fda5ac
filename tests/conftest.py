"""Shared fixtures: one sandbox for the session (in its own thread and loop), fresh
accounts per test, and small scripted servers on 127.0.0.1 for hostile merchants."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import settings

from tests import tls_bundle
from tests.sandboxes import payment_options
from x402_client import PaymentOptions
from x402_eur_sandbox import Account, Sandbox, ServedApp

# No test checks a certificate: every client reads a one-certificate CA bundle instead of the
# system's (tests/tls_bundle.py).
tls_bundle.use()

# Property tests check behaviour, not speed: on a loaded machine a case may take longer
# than hypothesis' default 200 ms deadline without anything being wrong.
settings.register_profile("x402", deadline=None)
settings.load_profile("x402")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core. The integration lane spends about half its time
    waiting on its servers (anvil, uvicorn, subprocesses), so a core can serve two."""
    return 2 * (os.cpu_count() or 1)


#: The longest test files, longest first (each takes 10-30 s on a busy worker). With
#: `--dist loadfile --no-loadscope-reorder` (`make test`), xdist hands whole files to the
#: workers in collection order: these start first, so that no long file is left running
#: alone at the end. A file not listed runs after them, in its usual order.
LONGEST_FIRST = (
    "tests/integration/test_faults.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_benchmarks_smoke.py",
    "tests/integration/test_crash_matrix.py",
    "tests/integration/test_faults_chains.py",
    "sandbox/tests/test_sandbox_cli.py",
    "tests/integration/test_long_run.py",
    "tests/integration/test_benchmarks_smoke_chains.py",
    "tests/integration/test_benchmarks_smoke_fleet.py",
    "tests/integration/test_budget.py",
    "tests/integration/test_walkthrough.py",
    "tests/integration/test_mcp_http_guard.py",
    "tests/integration/test_requests_session.py",
    "tests/integration/test_examples.py",
    "tests/integration/test_euro_rail.py",
    "tests/integration/test_mcp_server.py",
    "tests/integration/test_sync_client.py",
    "tests/integration/test_notebook.py",
)


# --- lanes: tests/unit (pure), tests/flow (httpx.MockTransport), tests/integration (real I/O) ---

TESTS = Path(__file__).resolve().parent
#: The lanes that never touch the network: a socket there is a test in the wrong lane.
NO_NETWORK = ("unit", "flow")
#: Tests on httpx.MockTransport alone that stay in tests/integration, and why.
MOCKED_IN_INTEGRATION = {
    "tests/integration/test_long_run.py::test_twenty_thousand_payments_keep_memory_flat": (
        "a soak run of 20,000 payments (most of a minute), beside its run over a real socket: "
        "the flow lane runs in seconds"
    ),
}


def lane_of(path: Path) -> str | None:
    """The lane of a test file: the folder under tests/ it lives in."""
    try:
        return path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None


class RealIO:
    """What the tests do for real: each TCP or UDP socket connected or listened on, each
    process started (which may use the network where this process cannot see it), and each
    `httpx.MockTransport` made. A unit or flow test is refused a socket (`refuse`); the
    fixtures whose set-up did real I/O are remembered (`fixtures`), so that a test using one
    a former test set up (a session's sandbox, a module's crash runs) counts as real I/O."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refuse = False
        #: Threads older than the test, but its own (a session's servers): not the test's.
        self.others: set[int | None] = set()
        self.seen: list[str] = []
        self.count = 0
        self.mocks = 0
        self.fixtures: set[str] = set()

    def install(self) -> None:
        # `listen`, not `bind`: libraries bind a socket at import to probe for IPv6
        # (urllib3), which sends nothing; a server listens.
        for name in ("connect", "connect_ex", "listen"):
            setattr(socket.socket, name, self._watched(name, getattr(socket.socket, name)))
        subprocess.Popen.__init__ = self._counted(subprocess.Popen.__init__, "count")  # type: ignore[method-assign]
        httpx.MockTransport.__init__ = self._counted(httpx.MockTransport.__init__, "mocks")  # type: ignore[method-assign]

    def _counted(self, init: Any, counter: str) -> Any:
        def counted(instance: Any, *args: Any, **kwargs: Any) -> None:
            with self.lock:
                setattr(self, counter, getattr(self, counter) + 1)
            init(instance, *args, **kwargs)

        return counted

    def _watched(self, name: str, call: Any) -> Any:
        def watched(sock: socket.socket, *args: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                with self.lock:
                    self.count += 1
                    if self.refuse and threading.get_ident() not in self.others:
                        self.seen.append(f"socket.{name}{args!r}")
                        raise ConnectionRefusedError(f"no {name} in this lane: {args!r}")
            return call(sock, *args)

        return watched


REAL_IO = RealIO()
REAL_IO.install()


class _FixtureWatch:
    """Remembers the fixtures whose set-up did real I/O. A plugin of its own: a session
    fixture is set up through the session's hooks, which a conftest below the root does
    not take part in."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Iterator[Any]:
        before = REAL_IO.count
        result = yield
        if REAL_IO.count != before:
            REAL_IO.fixtures.add(fixturedef.argname)
        return result


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_FixtureWatch(), "x402-lanes-fixture-watch")


def misplaced(lane: str | None, nodeid: str, sockets: list[str], mocked: bool, real: bool) -> str:
    """Why a test that did this is in the wrong lane ("" when it is not): `sockets` it was
    refused, whether it made an `httpx.MockTransport`, whether it did real I/O."""
    if sockets:
        return (
            f"a test in tests/{lane} used the network ({', '.join(sockets[:3])}): the unit "
            "and flow lanes run without sockets; it belongs in tests/integration"
        )
    if lane == "integration" and mocked and not real and nodeid not in MOCKED_IN_INTEGRATION:
        return (
            "a test in tests/integration ran on httpx.MockTransport alone (no socket, no "
            "process, no fixture that used one): it belongs in tests/flow"
        )
    return ""


@pytest.fixture(autouse=True)
def lane_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """A unit or flow test opens no socket (even one its code would survive failing); an
    integration test that makes an `httpx.MockTransport` does some real I/O too (a socket,
    a process, or a fixture that did): else it fails, saying which lane it belongs in."""
    lane = lane_of(Path(str(request.node.path)))
    with REAL_IO.lock:
        REAL_IO.seen.clear()
        REAL_IO.refuse = lane in NO_NETWORK
        REAL_IO.others = {t.ident for t in threading.enumerate()} - {threading.get_ident()}
        count, mocks = REAL_IO.count, REAL_IO.mocks
    try:
        yield
    finally:
        with REAL_IO.lock:
            REAL_IO.refuse = False
            seen, REAL_IO.seen = REAL_IO.seen, []
            real = REAL_IO.count != count or bool(REAL_IO.fixtures & set(request.fixturenames))
            mocked = REAL_IO.mocks != mocks
    nodeid = request.node.nodeid.split("[", 1)[0]
    wrong = misplaced(lane, nodeid, seen, mocked, real)
    if wrong:
        pytest.fail(wrong, pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def no_real_state_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test touches the user's real state file (the CLI and `x402-eur mcp` default to
    one under the user's data directory): it points to a temporary one for the session."""
    import os

    saved = {k: os.environ.get(k) for k in ("X402_EUR_STATE", "XDG_DATA_HOME")}
    root = tmp_path_factory.mktemp("state")
    os.environ["X402_EUR_STATE"] = str(root / "state.sqlite3")
    os.environ["XDG_DATA_HOME"] = str(root / "xdg")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The shared euro sandbox. Tests open their own accounts so balances don't mix."""
    with Sandbox.run_in_thread() as running:
        yield running


@pytest.fixture
def payer(sandbox: Sandbox) -> Account:
    return sandbox.bank.open_account("10.00")


@pytest.fixture
def options_for(sandbox: Sandbox) -> Callable[..., PaymentOptions]:
    def make(account: Account, **overrides: Any) -> PaymentOptions:
        return payment_options(
            sandbox, api_key=account.api_key, from_account=account.code, **overrides
        )

    return make


class Recorder:
    """ASGI wrapper that records each request's method, path and headers, then delegates
    (or answers 200 `{"recorded": true}` when there is nothing to delegate to)."""

    def __init__(self, app: Any = None) -> None:
        self.app = app
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.requests.append((scope["method"], scope["path"], headers))
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        body = b'{"recorded": true}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Any], Any]]:
    """`url = await serve(app)`: serve an ASGI app on a free port for this test."""
    served: list[ServedApp] = []

    async def start(app: Any) -> str:
        server = await ServedApp(app, "test-app").start()
        served.append(server)
        return server.url

    yield start
    for server in served:
        await server.stop()


def scripted_402(body: bytes | str, status: int = 402, headers: dict[str, str] | None = None):
    """An ASGI app that answers every request with `status` and `body`."""
    raw = body.encode() if isinstance(body, str) else body

    async def app(scope: Any, receive: Any, send: Any) -> None:
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    return app


def bank_payments(sandbox: Sandbox, account: Account) -> list[Any]:
    """The payments `account` made (moved money), in order."""
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


# --- secret scan: nothing the suite logs, and no error message, may hold a secret ---------

_SANDBOX_KEY = re.compile(r"sk_sandbox_[A-Za-z0-9_\-]{8,}")
_KNOWN_SECRETS: set[str] = {"sk_live_super_secret_value", "sk_do_not_print"}
_ERROR_MESSAGES: list[str] = []
#: Text that left a process of ours by other ways (a subprocess's stderr, an MCP tool
#: result): the session-wide scan covers it too.
_OTHER_OUTPUT: list[str] = []


def scan_for_secrets(text: str) -> str:
    """Hand `text` to the session-wide secret scan; returns it unchanged."""
    _OTHER_OUTPUT.append(text)
    return text


def register_secrets(*secrets: str) -> None:
    """Make the session-wide scan look for `secrets` too (credentials a test hands the
    client where it could print them: an RPC URL's key, a merchant's query token)."""
    _KNOWN_SECRETS.update(secrets)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a broken log call is not this handler's business
            self.lines.append(str(record.msg))


def _leaks(text: str) -> list[str]:
    found = set(_SANDBOX_KEY.findall(text))
    found |= {s for s in _KNOWN_SECRETS if s in text or s.removeprefix("0x") in text}
    return sorted(found)


@pytest.fixture(scope="session", autouse=True)
def secret_scan() -> Iterator[None]:
    """Capture every log record of the session (x402_client at DEBUG) and every X402Error
    message; at the end, fail if any sandbox API key or registered private key shows up."""
    from x402_client import X402Error

    capture = _Capture()
    capture.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(capture)
    watched = {name: logging.getLogger(name).level for name in ("x402_client", "httpx")}
    logging.getLogger("x402_client").setLevel(logging.DEBUG)
    logging.getLogger("httpx").setLevel(logging.INFO)

    original_init = X402Error.__init__

    def recording_init(self: Any, message: str, *args: Any, **kwargs: Any) -> None:
        _ERROR_MESSAGES.append(str(message))
        original_init(self, message, *args, **kwargs)

    X402Error.__init__ = recording_init  # type: ignore[method-assign]
    try:
        from x402_eur_sandbox import EvmSandbox

        original_start = EvmSandbox.start

        async def registering_start(self: Any, sandbox: Any) -> None:
            _KNOWN_SECRETS.add(self.payer_key)
            await original_start(self, sandbox)

        EvmSandbox.start = registering_start  # type: ignore[method-assign]
    except ImportError:  # pragma: no cover - EVM extra missing
        original_start = None
    yield
    X402Error.__init__ = original_init  # type: ignore[method-assign]
    if original_start is not None:
        EvmSandbox.start = original_start  # type: ignore[method-assign]
    root.removeHandler(capture)
    for name, level in watched.items():
        logging.getLogger(name).setLevel(level)
    leaked = (
        _leaks("\n".join(capture.lines))
        + _leaks("\n".join(_ERROR_MESSAGES))
        + _leaks("\n".join(_OTHER_OUTPUT))
    )
    if leaked:
        raise AssertionError(f"secrets leaked into logs or error messages: {leaked}")


# --- PostgreSQL: one cluster per test worker, a fresh database per test --------------------


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Any]:
    """A PostgreSQL server on 127.0.0.1 for this worker (tests/postgres_server.py); its
    password is one of the secrets the session's scan looks for."""
    from tests.needs import missing, require
    from tests.postgres_server import INSTALL, PostgresCluster, server_bin

    require("psycopg", "pip install 'x402-eur[postgres]'")
    bindir = server_bin()
    if bindir is None:
        missing(f"PostgreSQL's initdb is not installed ({INSTALL})")
    cluster = PostgresCluster(bindir).start()
    register_secrets(cluster.password)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_cluster: Any) -> str:
    """The DSN of a new, empty database (password included)."""
    return str(postgres_cluster.database())


def state_kinds() -> list[Any]:
    """The stores a state location may name: `sqlite` (a file), `postgres` (a DSN)."""
    return [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres")]


def open_store(location: str | Path) -> Any:
    """The store of a state location (`SqliteStore` or `PostgresStore`)."""
    from x402_client._state.stores import open_store as open_state_store

    return open_state_store(location)
