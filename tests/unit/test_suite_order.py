"""The suite's own scheduling hint names files that exist (a renamed file would silently
lose its early start)."""

from pathlib import Path

from tests.conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_started_first_exists_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert missing == []
