"""One module per construct. Each has a transformer class and ``transform(node, ctx)``
taking a FunctionDef and returning it converted. ``conversion.py`` runs them in order."""
