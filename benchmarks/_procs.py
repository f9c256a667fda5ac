"""The processes of a benchmark run: the servers (each in its own process) and the
client process (`_client.py`, fresh for every workload)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Self

import httpx

HERE = Path(__file__).resolve().parent
PY = sys.executable


class Proc:
    """A server process that prints one JSON line when ready and stops when stdin closes."""

    def __init__(self, *argv: str, ready_timeout: float = 180) -> None:
        self.argv = argv
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            [PY, *self.argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            _, err = self.proc.communicate(timeout=30)
            tail = (err or "").strip().splitlines()[-3:]
            raise RuntimeError(f"{self.argv[0]} failed: " + " | ".join(tail))
        self.info = json.loads(line)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Sandbox(Proc):
    """`benchmarks/_server.py`: the sandbox (merchant, payment API, facilitator, chains)."""

    def __init__(self, *flags: str) -> None:
        super().__init__(str(HERE / "_server.py"), *flags)

    def url(self, path: str) -> str:
        return str(self.info["merchant_url"]) + path

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.info["options"])

    def reset(self) -> None:
        httpx.post(self.info["control_url"] + "/reset").raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = httpx.get(self.info["control_url"] + "/stats")
        response.raise_for_status()
        return dict(response.json())


class Lean:
    """The lean merchant and payment API (`_lean.py`), each in its own process."""

    def __init__(self, impl: str = "raw") -> None:
        self.impl = impl
        self._stack = contextlib.ExitStack()
        self.merchant: dict[str, Any] = {}
        self.api: dict[str, Any] = {}

    def __enter__(self) -> Lean:
        script = str(HERE / "_lean.py")
        self.merchant = self._stack.enter_context(
            Proc(script, "merchant", "--impl", self.impl)
        ).info
        self.api = self._stack.enter_context(Proc(script, "payment-api", "--impl", self.impl)).info
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def options(self) -> dict[str, Any]:
        from _lean import API_KEY, PAYER_ACCOUNT

        return {"api_key": API_KEY, "from_account": PAYER_ACCOUNT, "api_url": self.api["url"]}

    @property
    def target(self) -> dict[str, Any]:
        """What a client workload needs to reach these servers: the merchant and options."""
        return {"merchant": self.merchant["url"], "options": self.options}

    @property
    def controls(self) -> dict[str, str]:
        return {"merchant": self.merchant["control_url"], "payment_api": self.api["control_url"]}

    def stats(self) -> dict[str, dict[str, Any]]:
        return {k: httpx.get(v + "/stats").json() for k, v in self.controls.items()}

    def reset(self) -> None:
        for url in self.controls.values():
            httpx.post(url + "/reset").raise_for_status()

    def paid_codes_match(self) -> bool:
        """Every proof the merchant served was paid at the payment API, exactly once."""
        stats = self.stats()
        return bool(stats["merchant"]["codes_digest"] == stats["payment_api"]["codes_digest"])


def client(workload: str, args: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run one workload in a fresh client process (`_client.py`); its JSON result."""
    done = subprocess.run(
        [PY, str(HERE / "_client.py"), workload, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.stderr.strip():
        print(textwrap.indent(done.stderr.rstrip()[-3000:], "  "), flush=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"client {workload} exited {done.returncode}: {tail[0]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
