"""The base class every config section derives from: unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: extra keys forbidden, field docstrings used as descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


def typed_union(*members: type[Section], default: str | None = None):
    """An ``Annotated`` union of sections keyed by their ``type`` literal; ``default`` when omitted."""
    from typing import Annotated, Union

    from pydantic import Discriminator, Tag

    def pick(v):
        if isinstance(v, dict):
            return v.get("type", default)
        return getattr(v, "type", default)

    tagged = tuple(Annotated[m, Tag(m.model_fields["type"].default)] for m in members)
    return Annotated[Union[tagged], Discriminator(pick)]  # type: ignore[valid-type]
