"""Every wait the user would notice gets a status line with a real measure: the bridge's
polls ("1 poll"), and the re-sends of a proof the merchant has not confirmed yet
("poll 5 of 8"); an interrupted display leaves no stale spinner behind."""

from __future__ import annotations

import contextlib
import io

import pytest

from x402_client._protocol.events import PaymentProgress
from x402_client.progress import bridge_progress_display


def confirming(polls: int, elapsed: float, wait: float) -> PaymentProgress:
    return PaymentProgress(
        stage="confirming",
        rail="euro",
        resource="http://merchant.test/weather",
        status="Payment not confirmed (status: Open)",
        elapsed=elapsed,
        polls=polls,
        max_polls=8,
        wait=wait,
    )


def test_unconfirmed_re_sends_print_a_line_each_once_the_wait_passes_a_second() -> None:
    stream = io.StringIO()
    on_progress, _ = bridge_progress_display(plain=True, stream=stream)
    for polls, elapsed, wait in ((1, 0.0, 0.1), (2, 0.1, 0.2), (4, 0.7, 0.8), (5, 1.5, 1.6)):
        on_progress(confirming(polls, elapsed, wait))
    assert stream.getvalue().splitlines() == [
        "x402 euro: the merchant has not confirmed the payment yet: poll 4 of 8 (1 s)",
        "x402 euro: the merchant has not confirmed the payment yet: poll 5 of 8, again in 2 s "
        "(2 s)",
    ]


def bridge_wait() -> PaymentProgress:
    return PaymentProgress(
        stage="waiting",
        rail="bridge",
        resource="http://merchant.test/paid",
        transaction_code="QP1",
        polls=1,
        elapsed=2.0,
    )


@pytest.mark.parametrize("interrupted", [False, True])
def test_the_live_display_says_1_poll_and_an_interrupt_clears_it(interrupted: bool) -> None:
    from rich.console import Console

    screen = io.StringIO()
    on_progress, display = bridge_progress_display(
        console=Console(file=screen, force_terminal=True, width=100)
    )
    with contextlib.suppress(KeyboardInterrupt), display:
        on_progress(bridge_wait())
        if interrupted:
            raise KeyboardInterrupt
    drawn = screen.getvalue()
    assert "· 1 poll\n" in drawn and "1 polls" not in drawn
    # a finished wait keeps its last line; an interrupted one erases it (cursor up, erase)
    assert drawn.endswith("\r\x1b[1A\x1b[2K" if interrupted else "1 poll\n\x1b[?25h")


def rpc_wait(elapsed: float, polls: int, status: str | None = None) -> PaymentProgress:
    return PaymentProgress(
        stage="rpc_waiting",
        rail="evm-permit",
        resource="",
        status=status,
        elapsed=elapsed,
        polls=polls,
        waiting_on="chain 137 RPC",
        endpoint=1,
        endpoints=2,
        attempt=2,
    )


def test_a_slow_rpc_call_prints_a_line_at_each_report_and_none_when_it_answers() -> None:
    stream = io.StringIO()
    on_progress, _ = bridge_progress_display(plain=True, stream=stream)
    for event in (rpc_wait(1.0, 1), rpc_wait(4.1, 2), rpc_wait(5.2, 2, "answered")):
        on_progress(event)
    assert stream.getvalue().splitlines() == [
        "x402 evm-permit: waiting for the chain 137 RPC: endpoint 1 of 2, attempt 2 (1 s)",
        "x402 evm-permit: waiting for the chain 137 RPC: endpoint 1 of 2, attempt 2 (4 s)",
    ]


@pytest.mark.parametrize("interrupted", [False, True])
def test_the_live_display_drops_a_slow_rpc_line_once_answered(interrupted: bool) -> None:
    from rich.console import Console

    screen = io.StringIO()
    on_progress, display = bridge_progress_display(
        console=Console(file=screen, force_terminal=True, width=100)
    )
    with contextlib.suppress(KeyboardInterrupt), display:
        on_progress(rpc_wait(1.0, 1))
        if interrupted:
            raise KeyboardInterrupt
        on_progress(rpc_wait(1.5, 1, "answered"))
    drawn = screen.getvalue()
    assert "waiting for the chain 137 RPC: endpoint 1 of 2, attempt 2" in drawn
    # interrupted, it is erased (cursor up, erase); answered, the line is cleared and no
    # line stays behind
    if interrupted:
        assert drawn.endswith("\r\x1b[1A\x1b[2K")
    else:
        assert drawn.endswith("\r\x1b[2K\x1b[?25h") and "\n" not in drawn
