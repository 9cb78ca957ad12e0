"""Hydra structured configs (one dataclass per group) and the loader that validates them."""
