"""A virtual environment that holds only the client and its own dependencies (no extras):
what a user who installs `x402-eur` alone has, for the start-up figure 3d.

Built without the network: a bare venv whose site-packages links, from the environment
running the benchmarks, the installed distributions the client requires (transitively),
and the `x402_client` package being measured."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sysconfig
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: The client's distribution.
CLIENT = "x402-eur"


def requirements(name: str) -> set[str]:
    """`name` and every distribution it requires without extras, transitively."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        for text in importlib.metadata.distribution(current).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The names a distribution installs at the top of site-packages."""
    names = {Path(str(f)).parts[0] for f in dist.files or []}
    return {n for n in names if n not in ("..", "__pycache__") and not n.endswith(".pth")}


def client_only_env(root: Path) -> Path:
    """Create the environment under `root`; its Python interpreter."""
    venv.create(root, with_pip=False, symlinks=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    for name in requirements(CLIENT) - {canonicalize_name(CLIENT)}:
        dist = importlib.metadata.distribution(name)
        for entry in _top_level(dist):
            target = Path(str(dist.locate_file(entry)))
            if target.exists() and not (site / entry).exists():
                (site / entry).symlink_to(target)
    spec = importlib.util.find_spec("x402_client")
    if spec is None or spec.origin is None:
        raise RuntimeError("x402_client is not importable here")
    (site / "x402_client").symlink_to(Path(spec.origin).parent)
    return root / "bin" / "python"
