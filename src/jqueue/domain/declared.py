"""Reading a declaring dataclass: each field with its resolved type hint, for the tables that
are made from one declaration (job fields, enqueue options, history records, effects)."""

from __future__ import annotations

import types
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, Union, get_args, get_origin, get_type_hints


@dataclass(frozen=True)
class DeclaredField:
    """One field of a dataclass, resolved.

    Attributes
    ----------
    field : dataclasses.Field
        The field itself (its ``metadata`` carries what the declaration adds).
    hint : Any
        Its resolved type hint.
    base : Any
        The hint's first type other than None (the hint itself when it does not admit None).
    nullable : bool
        Whether the hint admits None.
    required : bool
        Whether the field has no default.
    default : Any
        Its default (None when required).
    """

    field: Field[Any]
    hint: Any
    base: Any
    nullable: bool
    required: bool
    default: Any

    @property
    def name(self) -> str:
        """The field's name."""
        return self.field.name

    def parts(self) -> dict[str, Any]:
        """Return these parts by name, for a subclass that adds what its declaration says."""
        return {part.name: getattr(self, part.name) for part in fields(DeclaredField)}


def declared_fields(cls: type[Any], *, include_extras: bool = False) -> tuple[DeclaredField, ...]:
    """Return the fields of dataclass ``cls`` in declaration order, each resolved
    (``include_extras`` keeps ``Annotated`` hints whole)."""
    hints = get_type_hints(cls, include_extras=include_extras)
    resolved = []
    for declared in fields(cls):
        hint = hints[declared.name]
        nullable = get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)
        base = next(arg for arg in get_args(hint) if arg is not type(None)) if nullable else hint
        required = declared.default is MISSING
        default = None if required else declared.default
        resolved.append(DeclaredField(declared, hint, base, nullable, required, default))
    return tuple(resolved)
