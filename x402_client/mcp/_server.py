"""The MCP server around the tools: its description for the agent, logging to stderr with
secrets blanked, and the stdio and streamable-HTTP transports (the `mcp` SDK is imported
here, when serving, only)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._frontend.common import TOKEN_ENV
from .._protocol.redact import redact_secrets, redact_urls, secrets_of
from ._http_guard import require_bearer, require_own_host
from ._schemas import TOOLS
from ._tools import PaymentTools

if TYPE_CHECKING:
    import argparse

    from mcp.server.lowlevel import Server

    from .._options import PaymentOptions

__all__ = ["build_server", "serve"]

logger = logging.getLogger("x402_client.mcp")


def _instructions(options: PaymentOptions) -> str:
    from .._protocol.amounts import format_money

    limits = [budget.name + ("" if budget.window else " in total") for budget in options.budgets]
    caps = ", ".join(
        format_money(cap, currency) for currency, cap in options.max_amount_per_payment.items()
    )
    refused = _uncovered(options)
    return (
        "Fetches HTTP resources and pays x402 (402 Payment Required) answers from the "
        f"user's account, within the budget ({'; '.join(limits) or 'none set'}) and at "
        f"most {caps or 'nothing'} per payment."
        + (
            f" Offers in {' or '.join(refused)} are refused: no budget covers them."
            if refused
            else ""
        )
        + " Use quote to see a price without paying, budget to see what is left. Every error "
        "says whether money moved (moneyMoved). When money moved or may have, never repeat "
        "the fetch plainly: re-send with the proof the error gives. payments with "
        "unfinished lists the payments left unfinished (by this server or another process "
        "on the same state); resume finishes them without paying again. sessions lists "
        "the sessions (one deposit, a voucher per request) and what each holds unspent; "
        "refund_session returns that to the payer."
    )


def _uncovered(options: PaymentOptions) -> list[str]:
    """The currencies the options could pay that budgets leave out (so none is paid)."""
    if not options.budgets:
        return []
    budgeted = {budget.currency for budget in options.budgets}
    return [currency for currency in options.currencies if currency not in budgeted]


def _listed_tools() -> list[Any]:
    from mcp_types import Tool, ToolAnnotations

    return [
        Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.input_schema,
            output_schema=spec.output_schema,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=False,
                idempotent_hint=spec.read_only,
                open_world_hint=spec.open_world,
            ),
        )
        for spec in TOOLS.values()
    ]


def build_server(tools: PaymentTools) -> Server[Any]:
    """The low-level MCP `Server` serving `tools` (imports `mcp`)."""
    from mcp.server.lowlevel import Server
    from mcp_types import CallToolResult, ListToolsResult, TextContent

    from ..__version__ import __version__

    if TYPE_CHECKING:
        from mcp.server.context import ServerRequestContext
        from mcp_types import CallToolRequestParams, PaginatedRequestParams

    listed = _listed_tools()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        body, is_error = await tools.call(params.name, params.arguments)
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(body))],
            structured_content=body,
            is_error=is_error,
        )

    def input_schema(name: str) -> Mapping[str, Any] | None:
        spec = TOOLS.get(name)
        return None if spec is None else spec.input_schema

    return Server(
        "x402-eur",
        version=__version__,
        title="x402-eur: pay for HTTP within a budget",
        instructions=_instructions(tools.options),
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class _RedactingFormatter(logging.Formatter):
    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__("x402-eur mcp: %(levelname)s %(name)s: %(message)s")
        self.secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact_secrets(redact_urls(super().format(record)), self.secrets)


@contextlib.contextmanager
def _logging_to_stderr(level: str, secrets: Sequence[str]) -> Iterator[None]:
    """Every log record of the process to stderr, secrets blanked and the credentials of
    URLs redacted; ours at `level`, the libraries' (httpx, mcp, uvicorn) at WARNING unless
    `level` is debug."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RedactingFormatter(secrets))
    root = logging.getLogger()
    ours = logging.getLogger("x402_client")
    saved = root.level, ours.level
    numeric = getattr(logging, level.upper())
    root.addHandler(handler)
    root.setLevel(numeric if numeric == logging.DEBUG else logging.WARNING)
    ours.setLevel(numeric)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        ours.setLevel(saved[1])


def _spending(options: PaymentOptions) -> str:
    spending = "; ".join(b.name for b in options.budgets) or "no budget"
    refused = _uncovered(options)
    if refused:
        spending += f" ({', '.join(refused)} offers refused: no budget covers them)"
    return spending


async def serve(args: argparse.Namespace, options: PaymentOptions, token: str | None) -> int:
    """Serve the tools over stdio, or streamable HTTP with `--http`, until stopped."""
    import httpx

    from .._adapters.httpx_async import with_eur_payment
    from .._state.http import default_ssl_context

    secrets = secrets_of(options) + ([token] if token else [])
    with _logging_to_stderr(args.log_level, secrets):
        spending = _spending(options)
        # Below httpx's redirect handling: every hop's destination is checked.
        guard = options.destination_guard
        client = httpx.AsyncClient(
            follow_redirects=True,
            timeout=httpx.Timeout(60.0),
            verify=default_ssl_context(),
            transport=None if guard is None else guard.transport(),
        )
        if guard is not None:
            admitted = ", ".join(str(a) for a in guard.allow)
            logger.info(
                "fetch and quote reach public addresses%s",
                f" and {admitted}" if admitted else " only",
            )
        async with with_eur_payment(client, options) as paying:
            tools = PaymentTools(paying, options, max_body_bytes=args.max_body_bytes)
            await _announce_unfinished(options)
            server = build_server(tools)
            if args.http is None:
                logger.info("serving MCP on stdio; budget: %s", spending)
                await _serve_stdio(server)
            else:
                await _serve_http(
                    server, *args.http, spending=spending, token=token, origins=args.allow_origin
                )
    return 0


async def _announce_unfinished(options: PaymentOptions) -> None:
    """Say at start-up what the state holds unfinished, without recovering it: recovery
    re-sends requests and hands back resources, which only a caller of `resume` can take."""
    from .._state.shared import state_of

    journal = state_of(options).journal
    if journal is None:
        return
    try:
        records = await journal.unfinished()
    except Exception as exc:  # the server serves even when the journal cannot be read now
        logger.warning("the unfinished payments could not be read (%s)", type(exc).__name__)
        return
    dead = sum(1 for r in records if not r.in_progress)
    if dead:
        logger.warning(
            "%d unfinished payment(s) no live process is making (%d in all): the resume "
            "tool finishes them without paying again",
            dead,
            len(records),
        )


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    # While it serves, the transport points fd 1 at stderr: nothing but the protocol can
    # reach the real stdout, even a stray print().
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _announcing_server(
    host: str, port: int, spending: str, token: str | None, origins: Sequence[str]
) -> Any:
    """A uvicorn server class that logs where it listens once it does."""
    import socket

    import uvicorn

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if not self.started:
                return
            bound = [s.getsockname() for server_ in self.servers for s in server_.sockets]
            address, actual = bound[0][:2] if bound else (host, port)
            shown = f"[{address}]" if ":" in str(address) else address
            logger.info(
                "serving MCP over streamable HTTP at http://%s:%d/mcp; budget: %s; %s%s",
                shown,
                actual,
                spending,
                "bearer token required" if token else f"no authentication ({TOKEN_ENV} unset)",
                f"; pages from {', '.join(origins)} admitted" if origins else "",
            )

    return Announcing


async def _serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    spending: str,
    token: str | None,
    origins: Sequence[str] = (),
) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    # `require_own_host` checks Host and Origin on every address, so the SDK's own check
    # (on 127.0.0.1, localhost and ::1 only, admitting pages from any local port) is off.
    app: Any = server.streamable_http_app(
        host=host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    if token is not None:
        app = require_bearer(app, token)
    app = require_own_host(app, host, origins)
    # No uvicorn logging config: its records reach our stderr handler; its access log
    # (which would go to stdout) is off.
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="on"
    )
    await _announcing_server(host, port, spending, token, origins)(config).serve()
