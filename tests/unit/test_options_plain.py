"""`PaymentOptions` / `EvmOptions`: plain classes that pydantic validates (lax mode: a
numeric string for a number, a list for a tuple) with a model built on first use; its
messages, and the pydantic methods callers use."""

import ast
import copy
import dataclasses
import inspect
import pathlib
import pickle
import re
import weakref
from decimal import Decimal

import pytest

import x402_client._options as options_module
from x402_client import (
    Asset,
    Budget,
    ChainAOptions,
    ConfigurationError,
    EvmOptions,
    InMemoryBudgetStore,
    PaymentLedger,
    PaymentOptions,
)
from x402_client._protocol.secret import SecretStr
from x402_client._state.shared import state_of

KEY = "11" * 32
ADDRESS = "0x" + "ab" * 20


def _error(**values: object) -> str:
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions(**values)  # type: ignore[arg-type]
    return str(caught.value)


# --- keys: snake_case, camelCase, unknown -----------------------------------------------------


def test_aliases_are_pydantics_camel_case() -> None:
    from pydantic.alias_generators import to_camel

    for cls in (PaymentOptions, EvmOptions):
        assert {n: f.alias for n, f in cls.model_fields.items()} == {
            n: to_camel(n) for n in cls.model_fields
        }


def test_camel_case_keys() -> None:
    options = PaymentOptions(
        apiKey="k",
        fromAccount="ACC_1",
        apiUrl="https://api.example/",
        maxAmountPerPayment="0.25",
        statePath="state.db",
        paymentApiMaxConnections="7",
        evm={"privateKey": KEY, "rpcUrls": {137: "https://rpc/"}, "supportedCacheSeconds": 5},
    )
    assert options.api_key == SecretStr("k")
    assert (options.from_account, options.api_url) == ("ACC_1", "https://api.example")
    assert options.max_amount_per_payment == {"EUR": Decimal("0.25"), "USD": Decimal("0.25")}
    assert options.state_path == pathlib.Path("state.db")
    assert options.payment_api_max_connections == 7
    assert options.evm is not None and options.evm.rpc_urls == {137: ("https://rpc",)}
    assert options.evm.supported_cache_seconds == 5.0
    assert PaymentOptions.model_validate({"confirmationAttempts": 3}).confirmation_attempts == 3


def test_both_spellings_of_one_key_is_an_error() -> None:
    # As pydantic had it: the camelCase key wins and the other is unknown.
    assert "api_key: unknown option" in _error(api_key="a", apiKey="b")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"max_amount": "1"}, "max_amount: unknown option; did you mean 'max_amount_per_payment'?"),
        ({"maxAmount": "1"}, "maxAmount: unknown option; did you mean 'maxAmountPerPayment'?"),
        ({"apikey": "k"}, "apikey: unknown option; did you mean 'api_key'?"),
        (
            {"confirmation_attempt": 1},
            "confirmation_attempt: unknown option; did you mean 'confirmation_attempts'?",
        ),
        ({"zzzzzz": 1}, "zzzzzz: unknown option"),
    ],
)
def test_unknown_keys_get_a_did_you_mean(values: dict[str, object], expected: str) -> None:
    assert _error(**values) == f"invalid PaymentOptions: {expected}"


def test_nested_evm_errors_are_evm_options_errors() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions(evm={"private_key": KEY, "rpc_url": {137: "https://r"}})
    assert str(caught.value) == (
        "invalid EvmOptions: rpc_url: unknown option; did you mean 'rpc_urls'?"
    )
    with pytest.raises(
        ConfigurationError, match=r"^invalid EvmOptions: privateKey: Field required$"
    ):
        EvmOptions.model_validate({})


def test_every_problem_is_listed_fields_first_then_unknown_keys() -> None:
    assert _error(foo=1, confirmation_attempts=0, maxCandidates=50, bar=2) == (
        "invalid PaymentOptions: confirmation_attempts: Input should be greater than or equal "
        "to 1; maxCandidates: Input should be less than or equal to 20; foo: unknown option; "
        "bar: unknown option"
    )


# --- numbers: lax coercion and bounds ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kept"),
    [(5, 5), ("5", 5), (" 5 ", 5), (b"5", 5), (5.0, 5), ("5.0", 5), (Decimal("5"), 5), (True, 1)],
)
def test_int_options_take_what_pydantic_lax_mode_took(value: object, kept: int) -> None:
    options = PaymentOptions(max_candidates=value)  # type: ignore[arg-type]
    assert options.max_candidates == kept and type(options.max_candidates) is int


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5.5, "Input should be a valid integer, got a number with a fractional part"),
        ("5.5", "Input should be a valid integer, unable to parse string as an integer"),
        ("abc", "Input should be a valid integer, unable to parse string as an integer"),
        (float("inf"), "Input should be a finite number"),
        (None, "Input should be a valid integer"),
        ([5], "Input should be a valid integer"),
        (0, "Input should be greater than or equal to 1"),
        (21, "Input should be less than or equal to 20"),
    ],
)
def test_int_option_errors(value: object, message: str) -> None:
    assert _error(max_candidates=value) == f"invalid PaymentOptions: max_candidates: {message}"


@pytest.mark.parametrize(
    ("value", "kept"),
    [(1, 1.0), ("0.5", 0.5), (b"0.5", 0.5), (Decimal("0.5"), 0.5), (True, 1.0), ("inf", 1e999)],
)
def test_float_options_take_what_pydantic_lax_mode_took(value: object, kept: float) -> None:
    options = PaymentOptions(confirmation_wait=value)  # type: ignore[arg-type]
    assert options.confirmation_wait == kept and type(options.confirmation_wait) is float


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("confirmation_wait", -1, "Input should be greater than or equal to 0"),
        ("confirmation_wait", "nan", "Input should be greater than or equal to 0"),
        (
            "confirmation_wait",
            "abc",
            "Input should be a valid number, unable to parse string as a number",
        ),
        ("confirmation_wait", None, "Input should be a valid number"),
        ("payment_api_timeout", 0, "Input should be greater than 0"),
        ("bridge_deadline", -0.1, "Input should be greater than 0"),
        ("confirmation_attempts", 101, "Input should be less than or equal to 100"),
        ("merchant_error_retries", -1, "Input should be greater than or equal to 0"),
        ("merchant_error_retries", 11, "Input should be less than or equal to 10"),
        ("max_body_bytes", 1023, "Input should be greater than or equal to 1024"),
        ("payment_api_max_connections", 0, "Input should be greater than or equal to 1"),
        ("supported_cache_seconds", -1, "Input should be greater than or equal to 0"),
    ],
)
def test_bounds(field: str, value: object, message: str) -> None:
    if field in EvmOptions.model_fields:
        with pytest.raises(ConfigurationError) as caught:
            EvmOptions(private_key=KEY, **{field: value})
        assert str(caught.value) == f"invalid EvmOptions: {field}: {message}"
    else:
        assert _error(**{field: value}) == f"invalid PaymentOptions: {field}: {message}"


def test_bounds_are_inclusive_where_pydantic_had_ge_and_le() -> None:
    options = PaymentOptions(
        confirmation_attempts=100, merchant_error_retries=0, max_body_bytes=1024, max_candidates=1
    )
    assert (options.confirmation_attempts, options.merchant_error_retries) == (100, 0)
    assert PaymentOptions(confirmation_wait=0).confirmation_wait == 0.0


# --- other kinds of value ---------------------------------------------------------------------


def test_strings_paths_and_tuples() -> None:
    options = PaymentOptions(
        from_account=b"ACC_1",  # type: ignore[arg-type]
        state_path="x.db",
        prefer="euro",
        budgets=Budget("1"),
        assets=[Asset(chain_id=1, address=ADDRESS, symbol="T", currency="EUR")],
    )
    assert options.from_account == "ACC_1"
    assert options.state_path == pathlib.Path("x.db")
    assert options.prefer == ("euro",) and PaymentOptions(prefer=["a", "b"]).prefer == ("a", "b")
    assert options.budgets == (Budget("1"),) and len(options.assets) == 1
    budget = Budget("2")
    assert PaymentOptions(budgets=(b for b in [budget])).budgets[0] is budget
    assert PaymentOptions(budgets=[{"limit": "3"}]).budgets == (Budget("3"),)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"from_account": 5}, "from_account: Input should be a valid string"),
        ({"api_key": 5}, "api_key: Input should be a valid string"),
        (
            {"state_path": 5},
            "state_path: Input should be a path or a postgresql:// URL (or a PostgresDsn)",
        ),
        ({"prefer": ["euro", 5]}, "prefer.1: Input should be a valid string"),
        ({"prefer": None}, "prefer: Input should be a valid tuple"),
        ({"budgets": 5}, "budgets: Input should be a valid tuple"),
        (
            {"budgets": [Budget("1"), 5]},
            "budgets.1: Input should be a dictionary or an instance of Budget, or a string "
            "such as '5.00/24h'",
        ),
        ({"budgets": [{"limit": "1", "foo": 2}]}, "budgets.0.foo: Unexpected keyword argument"),
        ({"on_payment": 5}, "on_payment: Input should be callable"),
        ({"selector": "first"}, "selector: Input should be callable"),
        ({"budget_store": object()}, "budget_store: Input should be an instance of BudgetStore"),
        ({"ledger": []}, "ledger: Input should be an instance of PaymentLedger"),
        ({"evm": 5}, "evm: Input should be a valid dictionary or instance of EvmOptions"),
        ({"api_url": "ftp://x"}, "api_url: Value error, must be an http(s) URL"),
        (
            {"api_url": "http://api.example"},
            "api_url: Value error, must be https:// (plain http:// only for a loopback address)",
        ),
        (
            {"max_amount_per_payment": 0.5},
            "max_amount_per_payment: Value error, limit: amount must be a decimal string (or "
            'Decimal), e.g. "0.50", not a float: a float cannot hold money exactly',
        ),
        (
            {"max_amount_per_payment": {"usd": "-1"}},
            "max_amount_per_payment: Value error, limit for usd: amount '-1' is negative: it "
            "must be positive (or zero)",
        ),
    ],
)
def test_wrong_kinds_of_value(values: dict[str, object], message: str) -> None:
    assert _error(**values) == f"invalid PaymentOptions: {message}"


def test_a_budget_mapping_is_checked_by_budget_itself() -> None:
    # A float limit is refused as `Budget` refuses it, never rounded into a Decimal.
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions(budgets=[{"limit": 0.5}])
    assert str(caught.value).startswith("budget limit: amount must be a decimal string")


def test_a_destination_guard_is_kept_and_nothing_else_passes_for_one() -> None:
    from x402_client._state.netguard import DestinationGuard

    guard = DestinationGuard()
    assert PaymentOptions(destination_guard=guard).destination_guard is guard
    assert _error(destination_guard="guard") == (
        "invalid PaymentOptions: destination_guard: Input should be an instance of DestinationGuard"
    )


def test_instances_and_callables_are_kept_as_given() -> None:
    store, ledger, evm = InMemoryBudgetStore(), PaymentLedger(), EvmOptions(private_key=KEY)

    def hook(intent: object) -> bool:
        return True

    options = PaymentOptions(budget_store=store, ledger=ledger, evm=evm, on_before_payment=hook)
    assert options.budget_store is store and options.ledger is ledger and options.evm is evm
    assert options.on_before_payment is hook


def test_limits() -> None:
    # One amount caps every currency; a mapping caps only the currencies it names.
    assert PaymentOptions(max_amount_per_payment=2).max_amount_per_payment == {
        "EUR": Decimal("2"),
        "USD": Decimal("2"),
    }
    assert PaymentOptions(max_amount_per_payment={"usd": "0.5"}).max_amount_per_payment == {
        "USD": Decimal("0.5"),
    }
    assert PaymentOptions().max_amount_per_payment == {"EUR": Decimal("1"), "USD": Decimal("1")}
    assert PaymentOptions().max_amount_per_payment is not PaymentOptions().max_amount_per_payment


def test_api_url_loopback_and_trailing_slash() -> None:
    for url in (
        "http://127.0.0.1:8080",
        "http://localhost:1",
        "http://[::1]:2",
        "http://a.localhost",
    ):
        assert PaymentOptions(api_url=url + "/").api_url == url
    assert PaymentOptions(api_url="https://api.example//").api_url == "https://api.example"


def test_evm_options() -> None:
    evm = EvmOptions(
        private_key="0x" + KEY, rpc_urls={"137": ["https://a/", "http://b"], 1: "https://c"}
    )
    assert evm.rpc_urls == {137: ("https://a", "http://b"), 1: ("https://c",)}
    assert evm.private_key.get_secret_value() == "0x" + KEY
    assert EvmOptions(private_key=KEY).rpc_urls == {}
    for bad, message in (
        ({"private_key": "zz"}, "private_key: Value error, private_key must be 32 bytes of hex"),
        (
            {"private_key": KEY, "rpc_urls": {137: []}},
            "rpc_urls: Value error, no RPC URL for chain 137",
        ),
        (
            {"private_key": KEY, "rpc_urls": {137: "ftp://x"}},
            "rpc_urls: Value error, must be an http(s) URL",
        ),
        (
            {"private_key": KEY, "rpc_urls": {137: 5}},
            "rpc_urls: Value error, must be an http(s) URL",
        ),
        ({"private_key": KEY, "rpc_urls": [137]}, "rpc_urls: Input should be a valid dictionary"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            EvmOptions.model_validate(bad)
        assert str(caught.value) == f"invalid EvmOptions: {message}"


# --- secrets ----------------------------------------------------------------------------------


def test_secret_str() -> None:
    secret = SecretStr("sk_live_x")
    assert secret.get_secret_value() == "sk_live_x"
    assert str(secret) == "**********" and repr(secret) == "SecretStr('**********')"
    assert f"{secret}" == "**********" and "sk_live" not in f"{secret!r}"
    assert (
        secret == SecretStr("sk_live_x") and secret != SecretStr("other") and secret != "sk_live_x"
    )
    assert hash(secret) == hash(SecretStr("sk_live_x")) and len(secret) == 9
    assert secret and not SecretStr("") and str(SecretStr("")) == ""
    with pytest.raises(TypeError):
        SecretStr(5)  # type: ignore[arg-type]


def test_secrets_never_show() -> None:
    key = "sk_live_super_secret_value"
    options = PaymentOptions(
        api_key=key, evm={"private_key": KEY, "rpc_urls": {137: "https://rpc.example/v2/sk_rpc_1"}}
    )
    assert isinstance(options.api_key, SecretStr) and options.api_key.get_secret_value() == key
    dumped = options.model_dump()
    assert dumped["api_key"] == SecretStr(key) and dumped["evm"]["private_key"] == SecretStr(KEY)
    for text in (repr(options), str(options), repr(options.evm), str(dumped)):
        assert key not in text and KEY not in text
    for text in (repr(options), str(options)):
        assert "sk_rpc_1" not in text and "rpc.example" in text
    # Errors name the option, never the value.
    for bad in ({"api_key": key, "api_url": f"ftp://{key}"}, {"evm": {"private_key": key}}):
        assert key not in _error(**bad)


def test_another_librarys_secret_str_is_accepted() -> None:
    import pydantic

    options = PaymentOptions(api_key=pydantic.SecretStr("k"))  # type: ignore[arg-type]
    assert options.api_key == SecretStr("k")


# --- immutability, copies, equality -----------------------------------------------------------


def test_options_are_frozen() -> None:
    options = PaymentOptions()
    with pytest.raises(dataclasses.FrozenInstanceError, match="model_copy"):
        options.max_candidates = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        options.anything_else = 5  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        del options.prefer
    evm = EvmOptions(private_key=KEY)
    with pytest.raises(AttributeError):
        evm.rpc_urls = {}  # type: ignore[misc]
    assert options.max_candidates == 3


def test_state_is_per_options_object() -> None:
    options = PaymentOptions(budgets=Budget("1"))
    assert options._state is None
    state = state_of(options)
    assert options._state is state and state_of(options) is state
    weakref.ref(options)  # the state file's finalizer needs it


def test_model_copy_is_validated_and_has_its_own_state() -> None:
    options = PaymentOptions(api_key="k", prefer="euro")
    state = state_of(options)
    copied = options.model_copy(update={"maxCandidates": "5", "prefer": "bridge"})
    assert (copied.max_candidates, copied.prefer, copied.api_key) == (
        5,
        ("bridge",),
        options.api_key,
    )
    assert (options.max_candidates, options.prefer) == (3, ("euro",))
    assert copied._state is None and state_of(copied) is not state
    assert options.model_copy() == options
    with pytest.raises(ConfigurationError, match="max_candidates: Input should be less"):
        options.model_copy(update={"max_candidates": 50})
    with pytest.raises(ConfigurationError, match="did you mean 'prefer'"):
        options.model_copy(update={"prefers": "euro"})


def test_copy_and_pickle_carry_the_options_not_the_state() -> None:
    options = PaymentOptions(api_key="k", prefer="euro")
    state_of(options)
    pickled = pickle.loads(pickle.dumps(options))  # noqa: S301 - our own bytes
    for clone in (copy.copy(options), copy.deepcopy(options), pickled):
        assert clone == options and clone._state is None


def test_model_validate_and_dump() -> None:
    options = PaymentOptions.model_validate({"apiKey": "k", "evm": {"private_key": KEY}})
    assert PaymentOptions.model_validate(options) is options
    with pytest.raises(ConfigurationError, match="Input should be a valid dictionary"):
        PaymentOptions.model_validate([("api_key", "k")])
    dumped = options.model_dump()
    assert list(dumped) == list(PaymentOptions.model_fields)
    assert dumped["evm"] == {
        "private_key": SecretStr(KEY),
        "rpc_urls": {},
        "supported_cache_seconds": 60.0,
        "session_requests": 10,
    }
    assert "apiKey" in options.model_dump(by_alias=True)
    assert "from_account" not in options.model_dump(exclude_none=True)
    assert PaymentOptions.model_validate(dumped) == options


def test_equality() -> None:
    assert PaymentOptions(api_key="k") == PaymentOptions(apiKey="k")
    assert PaymentOptions(api_key="k") != PaymentOptions(api_key="j")
    assert PaymentOptions() != EvmOptions(private_key=KEY)
    with pytest.raises(TypeError):
        hash(PaymentOptions())


# --- defaults: declared once, on the options ---------------------------------------------------


@pytest.mark.parametrize(
    ("taker", "options"),
    [
        (
            "x402_client._protocol.delivery:Delivery",
            {
                "confirmation_attempts": "confirmation_attempts",
                "confirmation_wait": "confirmation_wait",
                "confirmation_max_wait": "confirmation_max_wait",
                "merchant_error_retries": "merchant_error_retries",
            },
        ),
        (
            "x402_client._rails.bridge:PollPolicy",
            {
                "first_interval": "bridge_poll_interval",
                "max_interval": "bridge_poll_max_interval",
                "deadline": "bridge_deadline",
            },
        ),
        (
            "x402_client._state.payment_api:PaymentAPI",
            {
                "timeout": "payment_api_timeout",
                "max_body_bytes": "max_body_bytes",
                "max_connections": "payment_api_max_connections",
            },
        ),
    ],
)
def test_what_runs_under_an_option_has_no_default_of_its_own(
    taker: str, options: dict[str, str]
) -> None:
    # A second default would drift from the option's: the caller passes the option's value.
    import importlib

    module, name = taker.split(":")
    parameters = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    for parameter, option in options.items():
        assert option in PaymentOptions.model_fields
        assert parameters[parameter].default is inspect.Parameter.empty, parameter


# --- the signature: made from the declarations ---------------------------------------------------


@pytest.mark.parametrize("cls", [PaymentOptions, EvmOptions, ChainAOptions])
def test_help_lists_every_option_as_a_keyword_with_its_default(cls: type) -> None:
    parameters = inspect.signature(cls).parameters
    assert list(parameters) == [*cls.model_fields, "aliases"]  # type: ignore[attr-defined]
    for name, field in cls.model_fields.items():  # type: ignore[attr-defined]
        if field.is_required():
            assert parameters[name].default is inspect.Parameter.empty, name
        else:
            assert parameters[name].default == field.get_default(), name


def test_no_options_class_writes_its_init_by_hand() -> None:
    # Type checkers make `__init__` from the declarations (PEP 681): a hand-written one,
    # even under TYPE_CHECKING, would list every option a second time.
    tree = ast.parse(inspect.getsource(options_module))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in (
            "PaymentOptions",
            "EvmOptions",
            "ChainAOptions",
        ):
            inits = [
                f.name
                for f in ast.walk(node)
                if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            ]
            assert inits == [], node.name
    assert hasattr(options_module._Options, "__dataclass_transform__")


#: Calls a type checker must accept, and mistakes it must flag (`# flags: <error code>`).
TYPED_CALLS = """
from decimal import Decimal

from x402_client import Budget, ChainAOptions, EvmOptions, PaymentOptions
from x402_client._protocol.secret import SecretStr

options = PaymentOptions(
    api_key="sk_test_1",
    from_account="ACC_1",
    max_amount_per_payment="0.50",
    budgets=["5.00/24h", Budget("2", currency="USD")],
    evm={"private_key": "11" * 32, "rpc_urls": {137: "https://rpc.example"}},
    chain_a=ChainAOptions(mnemonic="abandon " * 25, algod_url="https://node.example"),
    state_path="state.db",
    prefer="euro",
    confirmation_wait=1,
)
cap: dict[str, Decimal] = options.max_amount_per_payment
key: SecretStr | None = options.api_key
evm: EvmOptions | None = options.evm
PaymentOptions(max_amount="0.50")  # flags: call-arg
PaymentOptions(max_candidates="3")  # flags: arg-type
PaymentOptions(evm=EvmOptions(rpc_urls={}))  # flags: call-arg
ChainAOptions(mnemonic="abandon " * 25, algodUrl="https://node.example")  # flags: call-arg
options.max_candidates = 5  # flags: misc
wrong: str = options.max_candidates  # flags: assignment
"""


@pytest.mark.slow  # mypy checks the package first (about 40 s without its cache)
def test_type_checkers_see_each_option_as_a_keyword_of_the_type_it_takes(
    tmp_path: pathlib.Path,
) -> None:
    from mypy import api

    root = pathlib.Path(__file__).resolve().parents[2]
    snippet = tmp_path / "typed_calls.py"
    snippet.write_text(TYPED_CALLS)
    out, err, _ = api.run(
        [
            str(snippet),
            "--config-file",
            str(root / "pyproject.toml"),
            "--cache-dir",
            str(root / ".mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
        ]
    )
    flagged = {
        (int(line), code)
        for line, code in re.findall(r"^[^:\n]+:(\d+): error: .*\[([\w-]+)\]$", out, re.M)
    }
    expected = {
        (number, found.group(1))
        for number, text in enumerate(TYPED_CALLS.splitlines(), start=1)
        if (found := re.search(r"# flags: ([\w-]+)", text))
    }
    assert flagged == expected, out + err
