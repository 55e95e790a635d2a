"""jqueue's own keyed adapters refuse names that could leave their namespace, on every backend (the
keyed calls' contract itself, ``check_storage``, runs in test_storage_contract.py)."""

from __future__ import annotations

import pytest

from conftest import Backend


@pytest.mark.parametrize("bad", ["", "../x", "log/../x", "/abs", "log//x", "a b", "log/."])
async def test_unsafe_names_are_refused(backend: Backend, bad: str) -> None:
    storage, _ = backend.new_keyed()
    with pytest.raises(ValueError, match="invalid object name"):
        await storage.get(bad)
