"""What exporting raises and warns."""
from ..errors import GraphError


class ExportError(GraphError):
    """A graph could not be exported; the message names the op and the user's line."""


class ExportWarning(UserWarning):
    """An export went ahead with less than was asked (static shapes, dropped effects)."""
