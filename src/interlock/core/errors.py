"""One error type for bad input, so every message names where the problem is."""

from __future__ import annotations


class InterlockError(Exception):
    """Bad input or a broken invariant, located by file, item and field."""

    def __init__(self, message: str, *, file: str | None = None, item: str | None = None,
                 field: str | None = None) -> None:
        self.file, self.item, self.field, self.reason = file, item, field, message
        where = ", ".join(
            f"{label} {value}" for label, value in (("file", file), ("item", item), ("field", field))
            if value is not None
        )
        super().__init__(f"{where}: {message}" if where else message)
