"""The latency-aware actor: a fixed-rate control loop that executes action chunks while
the next chunk is inferred in parallel (in a worker process in wall-clock mode, or timed
by a latency model in virtual time), merges chunks by an execution strategy, and records
every tick as a transition.
"""
