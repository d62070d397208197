"""Generated C kernels: codegen (codegen.py), build and cache (compiler.py), calls (launch.py)."""
