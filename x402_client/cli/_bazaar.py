"""`x402-eur discover FACILITATOR [QUERY...]`: the paid resources a facilitator lists
(x402 Bazaar discovery), each with its price and whether this configuration would pay
it. Nothing is paid: fetching a listed resource pays what its own 402 asks.

The table fits the terminal's width (`COLUMNS`, else the terminal's, else 100): the
description is cut first (down to 12 characters), then the verdict (12); URLs last (24),
each cell cut at its end with `…`. Narrower than that, lines run over.
Below it, why each resource would not be paid, wrapped to the width. `--json` prints one JSON
object, amounts written as everywhere.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from .._frontend import common as _frontend
from .._protocol.redact import safe_url
from ._common import _close_state, _mistake, _open_state, _payment_options, _prog, _Trouble
from ._render import _flat, _json_line, _money, _raw_price

__all__ = ["add_discover"]

_HEADERS = ("#", "PRICE", "PAYABLE", "RESOURCE", "DESCRIPTION")
#: The columns cut to fit, in order (by index), and the narrowest each gets.
_SHRINKABLE = ((4, 12), (2, 12), (3, 24))
_ELLIPSIS = "…"


def _count(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 100:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count from 1 to 100")
    return int(value)


def _offset(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not an offset: write a whole number")
    return int(value)


def add_discover(commands: Any, groups: dict[str, argparse.ArgumentParser]) -> None:
    """Register `discover` with the command parsers."""
    discover = commands.add_parser(
        "discover",
        help="the paid resources a facilitator lists, with prices (pays nothing)",
        parents=[groups["limits"], groups["state"]],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List the paid resources FACILITATOR's discovery catalogue knows\n"
        "(x402 Bazaar: /discovery/resources), or search it with QUERY\n"
        "(/discovery/search): each with its price and whether this configuration\n"
        "would pay it. Nothing is paid; a listed price is the facilitator's claim,\n"
        "and fetching the resource pays what its own 402 asks.",
    )
    discover.add_argument("facilitator", type=_frontend.argument_type(_frontend.check_url))
    discover.add_argument("query", nargs="*", help="search words (none: the whole list)")
    discover.add_argument(
        "--type", choices=("http", "mcp"), help="only HTTP resources or MCP tools"
    )
    discover.add_argument("--network", help="only offers on this network, e.g. eip155:8453")
    discover.add_argument("--scheme", help="only offers of this scheme, e.g. exact")
    discover.add_argument("--pay-to", metavar="ADDRESS", help="only offers paying this address")
    discover.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="at most N (1 to 100, default 20)"
    )
    page = discover.add_mutually_exclusive_group()
    page.add_argument("--offset", type=_offset, default=0, metavar="N", help="the list from row N")
    page.add_argument("--cursor", help="the next page of a search (printed after the table)")
    discover.add_argument("--json", action="store_true", help="print the page as one JSON object")
    discover.epilog_factory = _frontend.environment_help
    discover.set_defaults(handler=_discover)


async def _discover(args: argparse.Namespace) -> int:
    from .._adapters.paying_client import payments

    query = " ".join(args.query) if args.query else None
    if query is None and args.cursor is not None:
        raise _mistake(_prog(args), "--cursor continues a search: give its words too")
    if query is not None and args.offset:
        raise _mistake(_prog(args), "a search continues with --cursor, not --offset")
    configured = _frontend.configured_in_env()
    # The state file is read only to count --budget, as for quote.
    options = _payment_options(args, state=bool(args.budget), from_env=configured)
    from .._flow.discovery import DiscoveryError

    try:
        _open_state(args, options)
        found = await payments(options).discover(
            args.facilitator,
            query,
            type=args.type,
            network=args.network,
            scheme=args.scheme,
            pay_to=args.pay_to,
            limit=args.limit,
            offset=args.offset,
            cursor=args.cursor,
        )
    except DiscoveryError as exc:
        raise _Trouble(str(exc)) from None
    finally:
        _close_state(options)
    if args.json:
        _json_line(_frontend.discovery_json(found), sys.stdout)
        return 0
    if not configured:
        sys.stderr.write(
            "x402-eur: no payment configuration in the environment (X402_EUR_API_KEY, ...): "
            "nothing is payable, prices only\n"
        )
    _print_discovery(found, args)
    return 0


def _price(resource: Any) -> str:
    entries = resource.quote.entries
    chosen = resource.payable[0] if resource.payable else (entries[0] if entries else None)
    if chosen is None:
        return "?"
    shown = _money(chosen.amount, chosen.currency) if chosen.intent else _raw_price(chosen.accept)
    return shown + (f" (+{len(entries) - 1})" if len(entries) > 1 else "")


def _refused(resource: Any) -> Any:
    """The option whose refusal explains a resource nothing of which would be paid."""
    return None if resource.payable or not resource.quote.entries else resource.quote.entries[0]


def _verdict(resource: Any) -> str:
    if resource.payable:
        return "yes"
    refused = _refused(resource)
    code = refused.reason if refused is not None else None
    return f"no: {code.replace('_', ' ')}" if code else "no"


def _where(resource: Any) -> str:
    listing = resource.listing
    url = safe_url(listing.resource)
    if listing.tool_name:
        return f"{url} tool {listing.tool_name}"
    if listing.method and listing.method != "GET":
        return f"{listing.method} {url}"
    return url


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + _ELLIPSIS


def fit(rows: Sequence[Sequence[str]], width: int) -> list[list[str]]:
    """`_HEADERS` and `rows` cut to fit `width` columns (two spaces between cells)."""
    table = [list(_HEADERS), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEADERS))]
    for column, narrowest in _SHRINKABLE:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess <= 0:
            break
        widths[column] = max(narrowest, widths[column] - excess)
    return [[_cut(cell, widths[i]) for i, cell in enumerate(row)] for row in table]


def _print_discovery(found: Any, args: argparse.Namespace) -> None:
    asked = "search " + repr(found.query) if found.query is not None else "list"
    payable = sum(1 for r in found.resources if r.payable)
    head = f"{safe_url(found.facilitator)} ({asked}): {len(found.resources)} resource(s), "
    print(head + f"{payable} payable")
    if found.resources:
        rows = [
            [str(i), _price(r), _verdict(r), _where(r), r.description or ""]
            for i, r in enumerate(found.resources, start=1)
        ]
        table = fit(rows, shutil.get_terminal_size((100, 24)).columns)
        widths = [max(len(row[i]) for row in table) for i in range(len(_HEADERS))]
        for row in table:
            cells = [
                cell.rjust(widths[i]) if i == 0 else cell.ljust(widths[i])
                for i, cell in enumerate(row)
            ]
            print("  ".join(cells).rstrip())
    width = shutil.get_terminal_size((100, 24)).columns
    notes = [
        f"#{index} not paid: {_frontend.plain_words(_flat(refused.message))}"
        for index, refused in enumerate(map(_refused, found.resources), start=1)
        if refused is not None and refused.message
    ]
    notes += [f"skipped row {s.index}: {_flat(s.reason)}" for s in found.skipped]
    if found.next_cursor is not None:
        notes.append(f"more: --cursor {found.next_cursor}")
    elif found.next_offset is not None:
        notes.append(f"more: --offset {found.next_offset}")
    notes.append(
        "Listed prices are the facilitator's claims: fetch pays what the resource's own 402 asks."
    )
    for note in notes:
        print(textwrap.fill(note, width, subsequent_indent="  ", break_long_words=False))
