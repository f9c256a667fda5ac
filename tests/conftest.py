"""Shared fixtures: one sandbox for the session (in its own thread and loop), fresh
accounts per test, and small scripted servers on 127.0.0.1 for hostile merchants."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

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
    "tests/integration/test_cli.py",
    "tests/integration/test_benchmarks_smoke.py",
    "tests/integration/test_crash_matrix.py",
    "tests/integration/test_faults_chains.py",
    "sandbox/tests/test_sandbox_cli.py",
    "tests/integration/test_long_run.py",
    "tests/integration/test_benchmarks_smoke_chains.py",
    "tests/integration/test_requests_session.py",
    "tests/integration/test_budget.py",
    "tests/integration/test_sync_client.py",
    "tests/integration/test_walkthrough.py",
    "tests/integration/test_mcp_http_guard.py",
    "tests/integration/test_examples.py",
    "tests/integration/test_euro_rail.py",
    "tests/integration/test_mcp_server.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_notebook.py",
)


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


def payments(sandbox: Sandbox, account: Account) -> list[Any]:
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
