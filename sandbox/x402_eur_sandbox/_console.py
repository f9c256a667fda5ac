"""What the sandbox's command and its demo share: console output, the resources and prices
the sandbox serves, and whether anvil can run here."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ._merchant import DEFAULT_PRICES, Price

__all__ = ["Out", "anvil_problem", "service_prices"]


class Out:
    """Rich output when `rich` is installed, plain lines otherwise."""

    def __init__(self) -> None:
        try:
            from rich.console import Console
        except ImportError:
            self.console: Any = None
        else:
            self.console = Console(highlight=False)

    def title(self, text: str) -> None:
        if self.console is not None:
            self.console.rule(f"[bold]{text}")
        else:
            print(f"\n== {text} ==")

    def line(self, text: str = "", style: str | None = None) -> None:
        if self.console is not None:
            self.console.print(text, style=style, markup=False)
        else:
            print(text)

    def table(self, rows: Sequence[tuple[str, str]]) -> None:
        if self.console is not None:
            from rich.table import Table

            table = Table(show_header=False, box=None, pad_edge=False)
            table.add_column(style="dim", no_wrap=True)
            table.add_column(overflow="fold")
            for key, value in rows:
                table.add_row(key, value)
            self.console.print(table)
        else:
            width = max(len(k) for k, _ in rows)
            for key, value in rows:
                print(f"  {key.ljust(width)}  {value}")


def service_prices(*, evm: bool = True, chain_a: bool = True) -> dict[str, Price]:
    """The sandbox's resources: the euro ones, plus those of the rails it runs."""
    prices: dict[str, Price] = dict(DEFAULT_PRICES)
    if evm:
        prices["/paid/evm-polygon"] = Price(
            Decimal("0.25"), "EVM permit on chain 137", rails=("eip155:137",)
        )
        prices["/paid/evm-mainnet"] = Price(
            Decimal("0.25"), "EVM permit on chain 1", rails=("eip155:1",)
        )
    if chain_a:
        prices["/paid/bridge"] = Price(Decimal("0.30"), "Bridged to chain A", rails=("ledgera",))
    return prices


def anvil_problem() -> str | None:
    """Why the EVM chains cannot run here (anvil missing), or None."""
    try:
        from ._anvil import find_anvil

        find_anvil()
    except (ImportError, RuntimeError) as exc:
        return str(exc)
    return None
