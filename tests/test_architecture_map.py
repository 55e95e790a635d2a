"""docs/architecture.md is the map of the code: it names every module of the package, and every
file it names exists (in src, tests or tools)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "architecture.md"


def _named() -> set[str]:
    return set(re.findall(r"`([\w/.]+\.py)`", MAP.read_text()))


def _is(path: Path, name: str) -> bool:
    return path.name == name or path.as_posix().endswith("/" + name)


def test_the_map_names_every_module() -> None:
    named = _named()
    modules = [p for p in (ROOT / "src" / "jqueue").rglob("*.py") if p.name != "__init__.py"]
    missing = [str(p.relative_to(ROOT)) for p in modules if not any(_is(p, n) for n in named)]
    assert missing == [], f"docs/architecture.md does not name {missing}"


def test_every_file_the_map_names_exists() -> None:
    files = [p for top in ("src", "tests", "tools") for p in (ROOT / top).rglob("*.py")]
    absent = sorted(n for n in _named() if not any(_is(p, n) for p in files))
    assert absent == [], f"docs/architecture.md names files that do not exist: {absent}"
