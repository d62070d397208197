"""Constants of the graph file format shared by the writer and the reader: the header, its
magic and version, the document tag, the nesting limit and the Python types a value may name."""
import struct

MAGIC = b"TOGRAPH\x00"
VERSION = 1
_HEADER = struct.Struct("<8sIIQ")
FORMAT = "tograph-graph"

_MAX_DEPTH = 256

_PYTYPES = {"bool": bool, "int": int, "float": float, "complex": complex}
