"""`python -m x402_client.mcp`: the MCP server, as `x402-eur mcp`."""

import argparse
import asyncio
import sys

from . import configure_parser, run

parser = argparse.ArgumentParser(prog="x402-eur mcp")
configure_parser(parser)
sys.exit(asyncio.run(run(parser.parse_args())))
