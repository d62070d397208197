"""Save and load graphs (placeholder until the serializer lands)."""


def save(graph, path):
    raise NotImplementedError


def load(path):
    raise NotImplementedError
