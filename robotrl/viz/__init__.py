"""Visualisation: rerun recordings of what the actor saw, planned and did."""
