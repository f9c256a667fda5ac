"""What the import a user writes loads: a structural check (module names), never a timing.

`from x402_client import with_eur_payment, PaymentOptions` must stay close to the cost of
`import httpx` (benchmark 3a): no pydantic, no payer, no wire models, no web3, no SQLite.
Those load when a client first pays (or never, for the EVM and SQLite extras). pydantic
validates options: it loads when options are first constructed, and nothing more does.
"""

import json
import subprocess
import sys

import pytest

STATEMENT = "from x402_client import with_eur_payment, PaymentOptions"

#: Never loaded by the statement.
FORBIDDEN = (
    "pydantic",
    "pydantic_core",
    "web3",
    "eth_account",
    "sqlite3",
    "x402_client._flow.payment",
    "x402_client._protocol.models",
    "x402_client._protocol.challenge",
    "x402_client._state.payment_api",
    "x402_client._state.shared",
)
#: Loaded when options are first constructed (they validate with it), not by the import.
VALIDATION = ("pydantic", "pydantic_core")
#: Not loaded by the statement unless `import httpx` itself loads them.
HEAVY_UNLESS_HTTPX_HAS_THEM = ("anyio", "difflib", "sqlite3")


def _modules_after(code: str) -> list[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.splitlines()[-1])


def _loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.fixture(scope="module")
def httpx_modules() -> list[str]:
    return _modules_after("import httpx")


@pytest.mark.parametrize(
    "code",
    [
        STATEMENT,
        # Building options (nested EVM options, budgets, assets, secrets) loads no more.
        STATEMENT + "\n"
        "from x402_client import Budget\n"
        "PaymentOptions(api_key='k', from_account='ACC_1', api_url='https://a.example',\n"
        "               evm={'private_key': '11' * 32, 'rpc_urls': {137: 'https://r'}},\n"
        "               budgets=Budget('1'), prefer='euro', max_amount_per_payment='0.5')\n"
        "PaymentOptions.from_env({'X402_EUR_EVM_PRIVATE_KEY': '22' * 32})",
    ],
    ids=["statement", "building-options"],
)
def test_the_public_import_loads_no_heavy_module(code: str, httpx_modules: list[str]) -> None:
    modules = _modules_after(code)
    assert "x402_client._options" in modules and "x402_client._adapters.httpx_async" in modules
    builds = "PaymentOptions(" in code
    assert builds == _loaded(modules, "pydantic")
    forbidden = [name for name in FORBIDDEN if not (builds and name in VALIDATION)]
    loaded = [name for name in forbidden if _loaded(modules, name)]
    assert not loaded, f"{loaded} loaded by: {code.splitlines()[0]}"
    extra = [
        name
        for name in HEAVY_UNLESS_HTTPX_HAS_THEM
        if _loaded(modules, name) and not _loaded(httpx_modules, name)
    ]
    assert not extra, f"{extra} loaded by: {code.splitlines()[0]} (httpx does not need them)"


def test_an_invalid_option_loads_nothing_of_the_flow() -> None:
    # The error path (with its "did you mean") loads the validation, and no more.
    modules = _modules_after(
        STATEMENT + "\n"
        "try:\n"
        "    PaymentOptions(max_amount='1')\n"
        "except Exception as exc:\n"
        "    assert 'did you mean' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no error')"
    )
    loaded = [name for name in FORBIDDEN if name not in VALIDATION and _loaded(modules, name)]
    assert not loaded
