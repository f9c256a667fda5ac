"""Figures 3a-3d: start-up. The import a user writes against `import httpx` (in the
benchmarks' environment, and in one with only the client's own dependencies), the heavy
EVM modules it loads (none), and the command line's `--help`."""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _client_env import client_only_env
from _figure import Figure, skipped, unless
from _procs import PY
from _stats import bootstrap, ratio_of_medians, summary
from _targets import IMPORT_RATIO

#: What each import figure runs. `import x402_client` is lazy (PEP 562): it loads
#: neither httpx nor pydantic; the usable API (`with_eur_payment`, `PaymentOptions`) does.
IMPORTS = {
    "httpx": "import httpx",
    "x402_client": "import x402_client",
    "api": "from x402_client import with_eur_payment, PaymentOptions",
}

_IMPORT_SNIPPET = """
import sys, time
t = time.perf_counter()
{statement}
elapsed = time.perf_counter() - t
heavy = sorted(m for m in ("web3", "eth_account", "eth_abi") if m in sys.modules)
print(elapsed, ",".join(heavy))
"""

#: Fresh processes that may write bytecode caches: a user's installed package has them, so
#: a stale or missing `__pycache__` (an editable install being edited, or an environment
#: with PYTHONDONTWRITEBYTECODE set) must not be measured as import time. The warm-up
#: import of each statement writes them.
IMPORT_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
#: The same for the environment with only the client's dependencies: nothing else on the path.
LEAN_ENV = {k: v for k, v in IMPORT_ENV.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

_CLI_TITLE = "3c. Start-up: `x402-eur --help` / `python -c 'import httpx'` (wall, informational)"


def _import_time(key: str, python: str = PY, cwd: str | None = None) -> tuple[float, list[str]]:
    out = subprocess.run(
        [python, "-c", _IMPORT_SNIPPET.format(statement=IMPORTS[key])],
        capture_output=True,
        text=True,
        check=True,
        env=IMPORT_ENV if python == PY else LEAN_ENV,
        cwd=cwd,
    ).stdout.split()
    return float(out[0]), [m for m in (out[1] if len(out) > 1 else "").split(",") if m]


def _wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, env=IMPORT_ENV)
    return time.perf_counter() - started


def import_profile(statement: str, top: int = 15) -> list[dict[str, Any]]:
    """`python -X importtime -c statement`: the heaviest imports (cumulative µs)."""
    err = subprocess.run(
        [PY, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        env=IMPORT_ENV,
    ).stderr
    rows: list[dict[str, Any]] = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append(
            {
                "module": name.strip(),
                "self_us": int(self_us),
                "cumulative_us": int(cumulative),
                "depth": depth,
            }
        )
    tops = [r for r in rows if r["depth"] <= 2]
    return sorted(tops, key=lambda r: -r["cumulative_us"])[:top]


def _import_times(
    runs: int, python: str = PY, cwd: str | None = None
) -> tuple[dict[str, list[float]], set[str]]:
    """Each statement's import time in `runs` fresh processes of `python`, interleaved;
    and the heavy modules the client's statements loaded."""
    keys = list(IMPORTS)
    for key in keys:  # warm the bytecode caches
        _import_time(key, python, cwd)
    times: dict[str, list[float]] = {key: [] for key in keys}
    heavy: set[str] = set()
    for i in range(runs):
        # Rotate the order so that no statement always runs first (or last).
        for key in keys[i % 3 :] + keys[: i % 3]:
            elapsed, loaded = _import_time(key, python, cwd)
            times[key].append(elapsed)
            if key != "httpx":
                heavy.update(loaded)
    return times, heavy


def _fig_import(
    key: str, fig_key: str, title: str, targeted: bool, times: dict[str, list[float]]
) -> Figure:
    """A statement's import time against `import httpx`'s, in the same processes' kind."""
    ours_t, httpx_t = times[key], times["httpx"]
    value = ratio_of_medians(ours_t, httpx_t)
    ok = value <= IMPORT_RATIO
    return Figure(
        fig_key,
        title,
        value,
        "x",
        f"<= {IMPORT_RATIO}" if targeted else "informational",
        ok if targeted else None,
        f"median {statistics.median(ours_t) * 1000:.0f} ms vs "
        f"{statistics.median(httpx_t) * 1000:.0f} ms, {len(ours_t)} interleaved fresh processes"
        + unless(ok or not targeted, value, IMPORT_RATIO, upper=True),
        [o / h for o, h in zip(ours_t, httpx_t, strict=True)],
        IMPORT_RATIO if targeted else None,
        {
            "statement": IMPORTS[key],
            "ms": summary([t * 1000 for t in ours_t]),
            "httpx_ms": summary([t * 1000 for t in httpx_t]),
            # The heaviest imports, in the benchmarks' environment (3a's).
            "importtime_top": import_profile(IMPORTS[key]),
            "importtime_httpx_top": import_profile(IMPORTS["httpx"]),
        },
        spread=bootstrap(ours_t, httpx_t, ratio_of_medians),
        spread_kind="95% bootstrap CI",
    )


def _fig_lazy(heavy: set[str]) -> Figure:
    loaded = sorted(heavy)
    return Figure(
        "lazy_evm",
        "3b. web3 / eth-account modules loaded by the import a user writes",
        float(len(loaded)),
        "modules",
        "0",
        not loaded,
        ", ".join(loaded) or "none of web3, eth_account, eth_abi",
        spread=(float(len(loaded)), float(len(loaded))),
        spread_kind="exact count",
    )


def _fig_cli(runs: int) -> Figure:
    if importlib.util.find_spec("x402_client.cli") is None:
        return skipped("cli", _CLI_TITLE, "informational", "x402_client.cli is missing")
    script = shutil.which("x402-eur", path=str(Path(PY).parent)) or ""
    cli = [script, "--help"] if script else [PY, "-m", "x402_client.cli", "--help"]
    base = [PY, "-c", "import httpx"]
    try:
        _wall(cli)
    except subprocess.CalledProcessError as exc:
        reason = f"`{' '.join(cli)}` failed: {exc.returncode}"
        return skipped("cli", _CLI_TITLE, "informational", reason)
    cli_t: list[float] = []
    base_t: list[float] = []
    for i in range(runs):
        pair = [(cli, cli_t), (base, base_t)]
        for cmd, bucket in pair if i % 2 == 0 else pair[::-1]:
            bucket.append(_wall(cmd))
    return Figure(
        "cli",
        _CLI_TITLE,
        ratio_of_medians(cli_t, base_t),
        "x",
        "informational",
        None,
        f"median {statistics.median(cli_t) * 1000:.0f} ms vs "
        f"{statistics.median(base_t) * 1000:.0f} ms",
        [c / b for c, b in zip(cli_t, base_t, strict=True)],
        None,
        spread=bootstrap(cli_t, base_t, ratio_of_medians),
        spread_kind="95% bootstrap CI",
    )


def fig_startup(counts: dict[str, int]) -> list[Figure]:
    runs = counts["import_runs"]
    times, heavy = _import_times(runs)
    api_title = (
        "3a. Start-up: `from x402_client import with_eur_payment, PaymentOptions` / `import httpx`"
    )
    stub_title = "3a'. Start-up: `import x402_client` (lazy stub) / `import httpx` (informational)"
    return [
        _fig_import("api", "import_api", api_title, True, times),
        _fig_import("x402_client", "import", stub_title, False, times),
        _fig_lazy(heavy),
        _fig_cli(runs),
        _fig_client_only(runs),
    ]


def _fig_client_only(runs: int) -> Figure:
    """3a in an environment with only the client's own dependencies, where `import httpx`
    loads no CLI extras (rich, click, pygments) that the benchmarks' environment has."""
    title = (
        "3d. Start-up, only the client's own dependencies installed: `from x402_client import "
        "with_eur_payment, PaymentOptions` / `import httpx`"
    )
    with tempfile.TemporaryDirectory(prefix="x402-client-only-") as root:
        try:
            python = str(client_only_env(Path(root)))
            times, _ = _import_times(runs, python, cwd=root)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            reason = f"the client-only environment failed: {type(exc).__name__}: {exc}"
            return skipped("import_client_only", title, f"<= {IMPORT_RATIO}", reason[:300])
    return _fig_import("api", "import_client_only", title, True, times)
