"""Framework-free Python-AST machinery: parsing, annotations, origins, names, templates,
code generation and loading. Nothing here knows about tensors."""
