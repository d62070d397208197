"""The one error type of the transpiler: a construct we cannot (or may not) convert."""


class ConversionError(Exception):
    """Conversion failed at a user source location.

    Attributes: ``filename`` and ``lineno`` point at the user's code (``None`` when
    unknown); ``reason`` says what went wrong. ``str(err)`` is ``"{file}:{line}: {reason}"``.
    """

    def __init__(self, reason, filename=None, lineno=None):
        self.reason = reason
        self.filename = filename
        self.lineno = lineno
        super().__init__(f"{filename}:{lineno}: {reason}")

    @classmethod
    def at(cls, node, reason):
        """An error located at ``node``'s origin (see ``pyct.origin``)."""
        from transpiler.pyct import origin
        loc = origin.of(node)
        if loc is None:
            return cls(reason)
        return cls(reason, loc.filename, loc.lineno)
