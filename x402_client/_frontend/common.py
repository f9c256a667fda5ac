"""What the command line (`x402_client.cli`) and the MCP server (`x402_client.mcp`) share:
how a person writes budgets, amounts, URLs, hosts and origins, where the state file is,
which environment variables configure them, and how they become `PaymentOptions`.

Every check raises `ValueError` with a message meant for the person who typed the value,
the same message in both front ends; `argument_type(check)` turns a check into an
argparse `type=`. Nothing here prints: each front end says it its own way.

Heavy imports (the options, the state file, the network guard) happen inside the
functions, so that `x402-eur --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._protocol.redact import safe_url

if TYPE_CHECKING:
    import httpx

    from .._options import PaymentOptions
    from .._protocol.budgets import Budget
    from .._protocol.dsn import PostgresDsn
    from .._protocol.errors import X402Error
    from .._state.netguard import AllowedHost, DestinationGuard

__all__ = [
    "ALLOW_HOSTS_ENV",
    "ALLOW_ORIGIN_ENV",
    "BUDGET_ENV",
    "BUDGET_NAME",
    "MIN_TOKEN_LENGTH",
    "STATE_ENV",
    "STATE_FIX",
    "TOKEN_ENV",
    "StateFileMistake",
    "allowed_origins_from_env",
    "argument_type",
    "check_allowed_host",
    "check_amount",
    "check_budget",
    "check_origin",
    "check_url",
    "configured_in_env",
    "destination_guard",
    "discovery_json",
    "environment_help",
    "note_payment_id",
    "one_line",
    "open_state",
    "paid_symbol",
    "parse_budget_texts",
    "payment_options",
    "payment_record",
    "plain_words",
    "public_name",
    "quote_json",
    "refusal_line",
    "skipped_lines",
    "state_file_message",
    "state_path",
    "token_problem",
]

#: The environment variable naming the state file (`--state` wins).
STATE_ENV = "X402_EUR_STATE"
#: The environment variable the MCP server reads when no `--budget` is given (comma-separated).
BUDGET_ENV = "X402_EUR_BUDGET"
#: The environment variable holding the bearer token that `mcp --http` requires when set.
#: Read from the environment only: a command line is visible to every local user (`ps`).
TOKEN_ENV = "X402_EUR_MCP_TOKEN"  # noqa: S105 (the variable's name, not a token)
#: The shortest token accepted: 16 characters (e.g. `secrets.token_urlsafe(32)` gives 43).
MIN_TOKEN_LENGTH = 16
#: The environment variable read when no `--allow-origin` is given (comma-separated origins).
ALLOW_ORIGIN_ENV = "X402_EUR_MCP_ALLOW_ORIGINS"
#: Hosts the MCP tools may reach although they are not public (comma-separated
#: `HOST[:PORT]`), admitted along with every `--allow-host`.
ALLOW_HOSTS_ENV = "X402_EUR_MCP_ALLOW_HOSTS"
#: The name of the budgets the CLI's `--budget` sets: it keeps them apart from other tools'
#: budgets in the state file and does not depend on the limit, so raising or lowering a
#: daily limit keeps what was already spent that day.
BUDGET_NAME = "x402-eur"
#: What to do about a state file that cannot be used.
STATE_FIX = f"Name another with --state PATH (or set {STATE_ENV}), or use --no-state."

_T = TypeVar("_T")

#: The front end a text is for: the command line (`--flags`, environment variables) or
#: the MCP server's tools (their arguments and the server's own settings).
Front = Literal["cli", "mcp"]


def argument_type(check: Callable[[str], _T]) -> Callable[[str], _T]:
    """`check` as an argparse `type=`: its `ValueError` becomes the argument's message."""

    def convert(value: str) -> _T:
        try:
            return check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = check.__name__
    return convert


# --- amounts and budgets -------------------------------------------------------------------


def check_amount(value: str) -> str:
    """`value` when it is an amount a cap can be (zero allowed), else `ValueError`."""
    from .._protocol.amounts import AmountError, parse_amount

    try:
        parse_amount(value, allow_zero=True)
    except AmountError as exc:
        raise ValueError(str(exc)) from None
    return value


def parse_budget_texts(
    texts: Iterable[str], currency: str = "EUR", *, name: str | None = None
) -> list[Budget]:
    """The budgets of `texts` (`AMOUNT[CURRENCY][/WINDOW]`, comma-separated in each)."""
    from .._protocol.budget_spec import parse_budgets

    return parse_budgets(texts, currency, name=name)


def check_budget(value: str) -> str:
    """`value` when it holds at least one budget, else `ValueError`."""
    if not parse_budget_texts([value]):
        raise ValueError(f"{value!r} holds no budget")
    return value


# --- URLs, hosts, origins, tokens ------------------------------------------------------------


def check_url(value: str) -> str:
    """`value` when it is an http(s) URL, else a `ValueError` that says what to write."""
    if value.startswith(("http://", "https://")):
        return value
    scheme = re.match(r"\A([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme is not None:
        raise ValueError(
            f"{value[:80]!r}: the {scheme[1]}:// scheme is not supported "
            "(http:// and https:// only)"
        )
    raise ValueError(f"{value!r} is not an http(s) URL (did you mean https://{value}?)")


def check_allowed_host(value: str) -> AllowedHost:
    """`HOST[:PORT]` a destination guard admits; `ValueError` quoting `value`."""
    from .._state.netguard import parse_allowed_host

    return parse_allowed_host(value)


def destination_guard(allowed: Sequence[AllowedHost]) -> DestinationGuard:
    """A guard that admits public addresses, `allowed` and those of `ALLOW_HOSTS_ENV`.
    `ValueError` for a bad variable."""
    from .._state.netguard import DestinationGuard, parse_allowed_hosts

    from_env = parse_allowed_hosts([os.environ.get(ALLOW_HOSTS_ENV, "")])
    return DestinationGuard([*allowed, *from_env])


def check_origin(value: str) -> str:
    """`value` as a browser writes it in `Origin`: `scheme://host[:port]`, in lower case,
    without the scheme's default port. Not `null` or `*`: they would admit any page."""
    from urllib.parse import urlsplit

    mistake = ValueError(
        f"{value!r} is not an origin: give scheme://host[:port], e.g. http://localhost:6274"
    )
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        raise mistake from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in value
        or "#" in value
    ):
        raise mistake
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def allowed_origins_from_env() -> list[str]:
    """The origins of `ALLOW_ORIGIN_ENV`; `ValueError` names the variable."""
    try:
        return [
            check_origin(o) for o in os.environ.get(ALLOW_ORIGIN_ENV, "").split(",") if o.strip()
        ]
    except ValueError as exc:
        raise ValueError(f"{ALLOW_ORIGIN_ENV}: {exc}") from None


def token_problem(token: str) -> str | None:
    """Why `token` cannot guard an HTTP endpoint, or None. A header carries it as
    `Bearer <token>`: printable ASCII without spaces (as `secrets.token_urlsafe` gives)."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is too short to guard a budget: give at least {MIN_TOKEN_LENGTH} characters"
    if not (token.isascii() and token.isprintable()) or " " in token:
        return "must be printable ASCII without spaces, as an HTTP header carries it"
    return None


# --- the state file and the options ----------------------------------------------------------


class StateFileMistake(Exception):
    """The state file cannot be used; the message says which and why, `STATE_FIX` the fix."""


def state_path(given: str | None, *, no_state: bool = False) -> Path | PostgresDsn | None:
    """The state: `--state` (given: a file, or a `postgresql://` URL), else the default
    (`$X402_EUR_STATE`, else the user's data directory); None with `--no-state`."""
    if no_state:
        return None
    if given:
        from .._protocol.dsn import state_location

        where = state_location(given)
        return where.expanduser() if isinstance(where, Path) else where
    from .._state.sqlite_store import default_state_path

    return default_state_path()


def state_file_message(path: Path | PostgresDsn | None, exc: BaseException) -> str:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else _flat(exc)
    if path is not None and not isinstance(path, Path):
        # The database's own message, with the DSN's password masked.
        return f"cannot open the state {path}: {path.redact(reason)}"
    return f"cannot open the state file {path}: {reason}"


def open_state(options: PaymentOptions) -> None:
    """Open the options' state file now, so that a bad one is a short message before
    anything is requested, not an error in the middle of a payment. `StateFileMistake`."""
    import sqlite3

    from .._protocol.errors import ConfigurationError
    from .._state.shared import state_of

    try:
        state_of(options)
    except (OSError, sqlite3.Error, ConfigurationError) as exc:
        raise StateFileMistake(state_file_message(options.state_path, exc)) from None


def payment_options(*, from_env: bool = True, **overrides: Any) -> PaymentOptions:
    """The options a front end pays with: the environment (unless `from_env` is False),
    then what the command line gave (`overrides` whose value is None are left out)."""
    from .._options import PaymentOptions

    given = {
        key: value for key, value in overrides.items() if value is not None or key == "state_path"
    }
    if not from_env:
        return PaymentOptions(**given)
    return PaymentOptions.from_env(**given)


def payment_record(request: httpx.Request) -> Any:
    """The payment `request` made (or was making), or None."""
    from .._flow.payment import GUARD

    return getattr(request.extensions.get(GUARD), "payment", None)


def paid_symbol(response: httpx.Response) -> str | None:
    """The symbol of the asset `response` was paid in (its receipt names the asset by
    address or id), when its payment is known."""
    record = payment_record(response.request)
    symbol = None if record is None else record.entry.intent.asset_symbol
    return symbol if isinstance(symbol, str) else None


def note_payment_id(exc: X402Error, request: httpx.Request) -> None:
    """Give `exc` the journal id of the payment `request` made, when it has none."""
    record = payment_record(request)
    if exc.payment_id is None and record is not None:
        exc.payment_id = record.journal_id


def quote_json(quote: Any, front: Front = "cli") -> dict[str, Any]:
    """A quote as JSON, each entry's amount written as everywhere (`format_amount`) and
    its reason in `front`'s words (`plain_words`)."""
    from decimal import Decimal

    from .._protocol.amounts import format_amount

    data: dict[str, Any] = quote.to_json()
    for entry in data["entries"]:
        if entry["amount"] is not None:  # written the same way on every rail
            entry["amount"] = format_amount(Decimal(entry["amount"]))
        if entry.get("message"):
            entry["message"] = plain_words(entry["message"], front)
    return data


def discovery_json(found: Any) -> dict[str, Any]:
    """A discovery page (`payments(...).discover`) as JSON, each resource's options
    written as a quote's (`quote_json`)."""
    data: dict[str, Any] = found.to_json()
    for resource, item in zip(found.resources, data["resources"], strict=True):
        item["entries"] = quote_json(resource.quote)["entries"]
    return data


def configured_in_env() -> bool:
    """Whether any payment setting is in the environment."""
    from .._options import ENV_VARS

    return any(os.environ.get(var) for names in ENV_VARS.values() for var in names)


# --- words ---------------------------------------------------------------------------------

_ENV_ABOUT = {
    "api_key": "the managed account's API key",
    "from_account": "the account that pays (ACC_...)",
    "api_url": "the payment API (https://, or http:// on loopback)",
    "max_amount_per_payment": "cap per payment, in every currency (--max-amount wins)",
    "evm_private_key": "the key that signs EVM permits (hex)",
    "evm_rpc_urls_1": "RPC URL(s) of chain 1, comma-separated",
    "evm_rpc_urls_137": "RPC URL(s) of chain 137, comma-separated",
    "assets": "tokens to pay standard x402 exact entries in, comma-separated, each\n"
    "      CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS] (CURRENCY EUR or USD, DECIMALS\n"
    "      default 6), e.g. 8453:0x...:EURC:EUR:6; on Solana, CHAIN is the network\n"
    "      and ADDRESS the mint, e.g. solana-devnet:<mint>:EURC:EUR:6",
    "chain_a_private_key": "your chain-A wallet's key (base64 of 64 bytes), pays chain-A entries",
    "chain_a_mnemonic": "or that wallet's 25-word mnemonic",
    "chain_a_algod_url": "the chain-A node the wallet reads from (needed with the key)",
    "chain_a_algod_token": "that node's API token, when it wants one",
    "chain_a_indexer_url": "a chain-A indexer: recovery looks direct payments up there",
    "svm_secret_key": "your Solana wallet's key (base58, or an id.json byte array), pays\n"
    "      Solana entries",
    "svm_rpc_url": "the Solana RPC the wallet reads from (needed with the key)",
    "sign_in_with_x": "1 or 0: sign in instead of paying again where a merchant offers it\n"
    "      (x402 sign-in-with-x; default 1; --no-sign-in wins)",
}


def environment_help() -> str:
    """The environment variables the paying commands read (`ENV_VARS`), for `--help`."""
    from .._options import ENV_VARS

    lines = ["environment:"]
    for name, variables in ENV_VARS.items():
        label = variables[0] + (f" (or {', '.join(variables[1:])})" if variables[1:] else "")
        lines.append(f"  {label}\n      {_ENV_ABOUT.get(name, name.replace('_', ' '))}")
    lines.append(
        f"  {STATE_ENV}\n      the state file (--state wins; default:\n"
        "      $XDG_DATA_HOME/x402-eur/state.sqlite3, i.e. ~/.local/share/x402-eur/state.sqlite3)"
    )
    lines.append(
        "\nbudgets: AMOUNT[CURRENCY][/WINDOW], e.g. 5.00/24h, 2.00USD/24h, 1.00 (a total);\n"
        "window units s, m, h, d. They are kept in the state file: repeated runs share them.\n"
        "With any budget given, offers in a currency no budget covers are refused: add\n"
        "--budget 2.00USD/24h to pay dollar offers under a euro budget."
    )
    return "\n".join(lines)


def _flat(text: object) -> str:
    return " ".join(str(text).split())


def public_name(exc: BaseException) -> str:
    """The error's class as a user imports it: `x402_client.ConfigurationError` for the
    package's own (their `__module__` is the public one), the bare name for others."""
    cls = type(exc)
    return f"x402_client.{cls.__qualname__}" if cls.__module__ == "x402_client" else cls.__name__


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line a person can act on (URLs without credentials)."""
    import httpx

    if isinstance(exc, httpx.ConnectError):
        where = safe_url(str(exc.request.url)) if exc._request is not None else "the server"
        return f"cannot connect to {where}: {exc or 'connection refused'}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out: {type(exc).__name__}"
    text = _flat(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


# --- refusals, in the words of each front end ------------------------------------------------

#: The library's words for Python callers, and what each front end says instead: the
#: exception messages stay Python-flavoured for Python users; the front ends translate.
_PYTHON_WORDS: tuple[tuple[str, str, str], ...] = (
    (
        r'add one, e\.g\. Budget\("[0-9.]+", currency="(\w+)"\), or (--budget \S+) on the '
        r"command line",
        r"add one, e.g. \2",
        r"the server's operator can add one (x402-eur mcp \2, or X402_EUR_BUDGET); the "
        r"budget tool lists what each currency may spend",
    ),
    (r"\bmax_amount_per_payment\b", "--max-amount", "the per-payment cap"),
    # the front ends' own budget is the one they speak of: its name says nothing
    (rf"\bbudget '{BUDGET_NAME}' ", "budget ", "budget "),
    (r"PaymentOptions\.assets or ", "", ""),
    (r"PaymentOptions\.chain_a\b", "X402_EUR_CHAIN_A_PRIVATE_KEY", "X402_EUR_CHAIN_A_PRIVATE_KEY"),
    (r"PaymentOptions\.evm\b", "X402_EUR_EVM_PRIVATE_KEY", "X402_EUR_EVM_PRIVATE_KEY"),
    (r"\s*\(max_candidates\)", "", ""),
    (r" \(EvmOptions\.rpc_urls\)", "", ""),
    (
        r"invalid EvmOptions: private_key: (?:Value error, )?",
        "X402_EUR_EVM_PRIVATE_KEY: ",
        "X402_EUR_EVM_PRIVATE_KEY: ",
    ),
    # the command line's budgets are named apart in the state file: a name nobody typed
    (f"budget '{BUDGET_NAME}' ", "budget ", "budget "),
)


def plain_words(text: str, front: Front = "cli") -> str:
    """`text` (a library message) with no Python in it: the settings named as `front`
    sets them, and the sentences that tell Python callers what to write
    (`extensions={...}`) left out; each front end says the command or tool call instead."""
    column = 1 if front == "cli" else 2
    for pattern, *instead in _PYTHON_WORDS:
        text = re.sub(pattern, instead[column - 1], text)
    kept = [part for part in text.split(". ") if "extensions=" not in part]
    return ". ".join(kept) if kept else text


#: How each reason an offer was skipped is counted in the one-line refusal.
_SKIP_LABELS = {
    "malformed": "unreadable",
    "unknown_scheme": "unknown scheme",
    "unpayable": "not payable with this configuration",
    "not_resumable": "not resumable",
    "expired": "expired",
    "no_cap": "no cap in its currency",
    "no_budget": "in a currency no budget covers",
    "not_chosen": "not chosen",
    "prepare_failed": "could not be prepared",
    "not_tried": "not tried",
}


_BUDGET_SKIPS = frozenset({"over_budget", "no_budget"})


def _skip_label(skipped: Any, front: Front) -> str:
    reason = str(getattr(skipped.reason, "value", skipped.reason))
    cap = "--max-amount" if front == "cli" else "the per-payment cap"
    if reason == "over_cap":
        return f"over {cap} {skipped.limit}" if skipped.limit else f"over {cap}"
    if reason == "over_budget":
        return f"over the budget {skipped.limit}" if skipped.limit else "over the budget"
    if reason == "no_cap" and skipped.intent is not None:
        return f"no {cap} for {skipped.intent.currency}"
    if reason == "no_budget" and skipped.intent is not None:
        return f"no budget in {skipped.intent.currency}"
    if reason == "unpayable" and "unknown asset" in str(skipped.message):
        return "unknown asset"
    return _SKIP_LABELS.get(reason, reason.replace("_", " "))


def refusal_line(exc: X402Error, front: Front = "cli") -> str:
    """A refused 402 in one line: how many offers were skipped and why, counted by
    reason (`no offer paid: 3 offers skipped (2 over --max-amount 0.05 USD, 1 unknown
    asset)`); a budget's refusal first says what it has spent. `skipped_lines` has each
    offer's reason. An error without skipped offers: its message, in `front`'s words."""
    skipped = list(exc.skipped)
    if not skipped:
        return plain_words(_flat(exc), front)
    counts = Counter(_skip_label(s, front) for s in skipped)
    many = "offer" if len(skipped) == 1 else "offers"
    grouped = ", ".join(f"{count} {label}" for label, count in counts.items())
    # a budget's refusal is said first: what it spent, or how to add one
    budget = next((s for s in skipped if str(s.reason.value) in _BUDGET_SKIPS), None)
    lead = f"{plain_words(_flat(budget.message), front)}; " if budget is not None else ""
    return f"no offer paid: {lead}{len(skipped)} {many} skipped ({grouped})"


def skipped_lines(exc: X402Error, front: Front = "cli") -> list[str]:
    """Each skipped offer of `exc` and why, one line each: `offer 2: ...`."""
    return [f"offer {s.index}: {plain_words(_flat(s.message), front)}" for s in exc.skipped]
