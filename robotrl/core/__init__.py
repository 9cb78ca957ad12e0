"""Core vocabulary: frozen value types, every Protocol (the seams between parts), and clocks."""
