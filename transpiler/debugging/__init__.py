"""Seeing what tograph made of a function: comparison with eager, explanations, the
HTML report."""
