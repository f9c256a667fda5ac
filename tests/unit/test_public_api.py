"""The public surface: exported names, the error tree, options, and import weight."""

import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

import x402_client
from x402_client import (
    ConfigurationError,
    EvmOptions,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentTransport,
    X402Error,
    with_eur_payment,
)
from x402_client._protocol.secret import SecretStr

#: The most public names the package may hold: a surface a user can keep in their head.
MOST_NAMES = 45


def declared(stub: str) -> list[str]:
    """The names `__init__.pyi` declares, one `from .module import Name as Name` per line;
    any other statement in it fails (the stub is the one place the surface is written)."""
    names = []
    for line in stub.splitlines():
        words = line.split()
        if not words or line.startswith("#"):
            continue
        assert len(words) == 6 and words[0] == "from" and words[2] == "import", line
        assert words[3] == words[5] and words[4] == "as", line
        names.append(words[5])
    return names


def stub_text() -> str:
    from pathlib import Path

    return (Path(x402_client.__file__).parent / "__init__.pyi").read_text()


def test_the_surface_is_declared_once_and_small() -> None:
    names = declared(stub_text())
    assert len(names) == len(set(names)), "a name declared twice"
    assert len(names) <= MOST_NAMES, f"{len(names)} public names, at most {MOST_NAMES}"
    assert sorted(x402_client.__all__) == sorted(names)
    for name in names:
        assert getattr(x402_client, name) is not None, name
    assert set(dir(x402_client)) >= set(names)


def test_the_bounds_fail_when_broken() -> None:
    with pytest.raises(AssertionError):
        declared("from .a import A as A\nMORE = 1\n")
    with pytest.raises(AssertionError):
        declared("from .a import A as B\n")
    many = "".join(f"from .m import N{i} as N{i}\n" for i in range(MOST_NAMES + 1))
    assert len(declared(many)) > MOST_NAMES


def test_a_name_outside_the_surface_is_no_attribute() -> None:
    for gone in ("quote_payment", "payment_ledger", "with_eur_payment_mcp", "os"):
        with pytest.raises(AttributeError):
            getattr(x402_client, gone)


def test_every_error_is_an_httpx_error() -> None:
    for name in x402_client.__all__:
        value = getattr(x402_client, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, X402Error) and issubclass(value, httpx.HTTPError), name


def test_error_tree_is_drawn_in_the_docstring() -> None:
    from x402_client._protocol import errors as _exceptions

    for name in _exceptions.__all__:
        assert name in (_exceptions.__doc__ or ""), name


def test_outcome_unknown_carries_recovery_data() -> None:
    error = PaymentOutcomeUnknown(
        "lost", proof="abc", transaction_code="QP1", payment_request_code="pr_1"
    )
    assert (error.proof, error.transaction_code, error.payment_request_code) == (
        "abc",
        "QP1",
        "pr_1",
    )


def test_import_does_not_load_web3_or_eth_account() -> None:
    code = (
        "import sys, x402_client, x402_eur_sandbox; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('web3', 'eth_account')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_postgres_extra_has_a_module_of_its_own_loaded_lightly() -> None:
    """`x402_client.postgres` is the extra's public module, outside the capped surface;
    importing it (or giving a DSN to the options) loads no psycopg: connecting does."""
    from x402_client import postgres

    assert postgres.__all__ == ["PostgresDsn", "PostgresStore", "StateUnavailable"]
    assert not set(postgres.__all__) & set(x402_client.__all__)
    code = (
        "import sys; from x402_client.postgres import PostgresStore; "
        "from x402_client import PaymentOptions; "
        "PaymentOptions(state_path='postgresql://u:pw@127.0.0.1:9/db'); "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'psycopg']; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_postgres_dsn_is_shown_without_its_password() -> None:
    from x402_client.postgres import PostgresDsn

    for given, shown in [
        ("postgresql://payer:s3cret@db:5432/x402", "postgresql://payer:***@db:5432/x402"),
        ("postgres://payer@db/x402?password=s3cret&sslmode=require",
         "postgres://payer@db/x402?password=***&sslmode=require"),
        ("postgresql://db/x402", "postgresql://db/x402"),
    ]:  # fmt: skip
        dsn = PostgresDsn(given)
        options = PaymentOptions(state_path=given)
        assert options.state_path == dsn and dsn.reveal() == given
        for text in (repr(dsn), str(dsn), repr(options), str(options)):
            assert "s3cret" not in text
        assert str(dsn) == shown
        if dsn.password is not None:
            assert dsn.redact(f"failed for {given}: s3cret") == f"failed for {shown}: ***"
    assert PaymentOptions(state_path="state.sqlite3").state_path == Path("state.sqlite3")


def test_options_hide_secrets() -> None:
    key = "sk_live_super_secret_value"
    pk = "0x" + "11" * 32
    options = PaymentOptions(
        api_key=key,
        from_account="ACC_1",
        api_url="https://api.example",
        evm=EvmOptions(private_key=pk, rpc_urls={137: "http://127.0.0.1:1"}),
    )
    for text in (repr(options), str(options), repr(options.evm), str(options.model_dump())):
        assert key not in text and pk[2:] not in text
    transport = PaymentTransport(httpx.AsyncHTTPTransport(), options)
    assert key not in repr(transport)


def test_options_from_mapping_and_env() -> None:
    options = PaymentOptions.from_env(
        {
            "X402_EUR_API_KEY": "k",
            "X402_EUR_ACCOUNT": "ACC_1",
            "X402_EUR_API_URL": "https://api.example/",
            "X402_EUR_MAX_AMOUNT_PER_PAYMENT": "0.25",
            "X402_EUR_EVM_PRIVATE_KEY": "22" * 32,
            "X402_EUR_RPC_URL_137": "http://a, http://b",
        }
    )
    assert options.api_key is not None and options.api_key.get_secret_value() == "k"
    assert options.api_url == "https://api.example"
    assert options.max_amount_per_payment == {"EUR": Decimal("0.25"), "USD": Decimal("0.25")}
    assert options.evm is not None and options.evm.rpc_urls == {137: ("http://a", "http://b")}
    assert options.has_managed_account
    spec_names = {
        "QUANTOZ_API_KEY": "q",
        "QUANTOZ_ACCOUNT_CODE": "A",
        "QUANTOZ_API_URL": "https://a",
    }
    assert PaymentOptions.from_env(spec_names).api_key.get_secret_value() == "q"


def test_from_env_with_nothing_usable_names_the_variables() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions.from_env({})
    assert all(
        name in str(caught.value)
        for name in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")
    )
    assert "X402_EUR_EVM_PRIVATE_KEY" in str(caught.value)
    with pytest.raises(ConfigurationError, match="X402_EUR_API_URL is not set"):
        PaymentOptions.from_env({"X402_EUR_API_KEY": "k", "X402_EUR_ACCOUNT": "ACC_1"})
    # An EVM key alone is usable configuration.
    assert PaymentOptions.from_env({"X402_EUR_EVM_PRIVATE_KEY": "22" * 32}).evm is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"api_kee": "typo"},
        {"api_url": "ftp://x"},
        {"max_amount_per_payment": "-1"},
        {"max_amount_per_payment": 0.5},
        {"evm": {"private_key": "not hex", "rpc_urls": {}}},
        {"confirmation_attempts": 0},
    ],
)
def test_bad_options_are_configuration_errors_without_values(bad: dict) -> None:
    with pytest.raises(ConfigurationError) as caught:
        with_eur_payment(httpx.AsyncClient(), {"api_key": "sk_do_not_print", **bad})
    assert "sk_do_not_print" not in str(caught.value)
    assert "not hex" not in str(caught.value)


def test_with_eur_payment_needs_an_httpx_client() -> None:
    with pytest.raises(ConfigurationError, match=r"httpx.AsyncClient or an httpx.Client") as e:
        with_eur_payment(object(), {})  # type: ignore[call-overload]
    assert "or an MCP client session" in str(e.value)


def test_per_request_settings_are_validated() -> None:
    from x402_client._flow.payment import parse_settings

    with pytest.raises(ConfigurationError):
        parse_settings({"pay": "no"})
    with pytest.raises(ConfigurationError):
        parse_settings({"typo": 1})
    assert parse_settings({"max_amount_per_payment": {"usd": "0.5"}}).limits == {
        "USD": Decimal("0.5")
    }


# --- None means the environment at every entry ------------------------------------------------

#: The managed account, as `PaymentOptions.from_env()` reads it.
ENVIRONMENT = {
    "X402_EUR_API_KEY": "sk_from_the_environment",
    "X402_EUR_ACCOUNT": "ACC_ENV",
    "X402_EUR_API_URL": "https://api.example",
}


class _ToolSession:
    """What `with_eur_payment_mcp` needs of an MCP client session: `call_tool`."""

    async def call_tool(self, name: str, arguments: Any = None, **kwargs: Any) -> Any:
        raise AssertionError("no tool is called")


def _through(entry: str, options: Any) -> tuple[PaymentOptions, Callable[[], None]]:
    """The options `entry` pays with when given `options` (`...`: none given), and how to
    close what it built."""
    import requests

    from x402_client import PaymentAdapter, SyncPaymentTransport

    given = () if options is ... else (options,)
    if entry == "PaymentTransport":
        transport = PaymentTransport(httpx.AsyncHTTPTransport(), *given)
        return transport.options, lambda: None
    if entry == "SyncPaymentTransport":
        sync = SyncPaymentTransport(httpx.HTTPTransport(), *given)
        return sync.options, sync.close
    if entry == "PaymentAdapter":
        adapter = PaymentAdapter(requests.adapters.HTTPAdapter(), *given)
        return adapter.options, adapter.close
    if entry == "with_eur_payment(httpx.Client)":
        client = with_eur_payment(httpx.Client(), *given)
        return client._transport.options, client.close  # type: ignore[attr-defined]
    if entry == "with_eur_payment(httpx.AsyncClient)":
        async_client = with_eur_payment(httpx.AsyncClient(), *given)
        return async_client._transport.options, lambda: None  # type: ignore[attr-defined]
    if entry == "with_eur_payment(requests.Session)":
        session = with_eur_payment(requests.Session(), *given)
        return session.get_adapter("https://merchant.example").options, session.close  # type: ignore[attr-defined]
    tools = _ToolSession()
    if entry == "with_eur_payment(MCP session)":
        with_eur_payment(tools, *given)
    else:
        with_eur_payment(tools, *given)
    return tools.call_tool.options, lambda: None  # type: ignore[attr-defined]


ENTRIES = [
    "PaymentTransport",
    "SyncPaymentTransport",
    "PaymentAdapter",
    "with_eur_payment(httpx.Client)",
    "with_eur_payment(httpx.AsyncClient)",
    "with_eur_payment(requests.Session)",
    "with_eur_payment(MCP session)",
    "with_eur_payment_mcp",
]


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from x402_client._options import ENV_VARS

    for variables in ENV_VARS.values():
        for variable in variables:
            monkeypatch.delenv(variable, raising=False)
    for variable, value in ENVIRONMENT.items():
        monkeypatch.setenv(variable, value)
    return ENVIRONMENT


@pytest.mark.parametrize("given", [None, ...], ids=["None", "none given"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_none_reads_the_environment_at_every_entry(
    entry: str, given: None, environment: dict[str, str]
) -> None:
    options, close = _through(entry, given)
    try:
        assert options.api_key == SecretStr(environment["X402_EUR_API_KEY"])
        assert (options.from_account, options.api_url) == ("ACC_ENV", "https://api.example")
    finally:
        close()


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_mapping_is_the_options_it_names_not_the_environment(
    entry: str, environment: dict[str, str]
) -> None:
    options, close = _through(entry, {"from_account": "ACC_GIVEN"})
    try:
        assert (options.api_key, options.from_account) == (None, "ACC_GIVEN")
    finally:
        close()


@pytest.mark.parametrize("entry", ENTRIES)
def test_none_without_a_usable_environment_names_the_variables(
    entry: str, environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("X402_EUR_API_URL")
    with pytest.raises(ConfigurationError, match="X402_EUR_API_URL is not set"):
        _through(entry, None)


def test_every_payments_method_has_its_sync_form_generated_from_it() -> None:
    """`SyncPayments` is written once, from `Payments`: each public method of one is a
    method of the other, with the same documentation, never a hand-made copy."""
    import inspect

    from x402_client import Payments, SyncPayments

    def public(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")}

    assert public(Payments) == public(SyncPayments)
    for name in public(Payments):
        made, source = getattr(SyncPayments, name), getattr(Payments, name)
        if inspect.iscoroutinefunction(source):
            assert made.__wrapped__ is source, name
            assert not inspect.iscoroutinefunction(made), name
