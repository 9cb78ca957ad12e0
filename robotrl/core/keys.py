"""Feature names shared by datasets (lerobot's own naming), training batches and policies.

Imported as a namespace (``from robotrl.core import keys``; ``batch[keys.ACTION]``) so a
module that reads a batch names one import, not one per feature.
"""

STATE = "observation.state"
"""float32 (..., state_dim): joint positions (action units), joint velocities, then extras."""
IMAGE_PREFIX = "observation.images."
"""+ camera name: uint8 (..., H, W, 3) RGB."""
PRIVILEGED_STATE_PREFIX = "cube."
"""State names so prefixed are what no real arm's sensors give (the sim's cube pose): a policy
reads them only with ``env.privileged_state`` (the sim's experts read them whatever it is)."""


def privileged(state_name: str) -> bool:
    """Whether a state column is one no real arm's sensors give (:data:`PRIVILEGED_STATE_PREFIX`)."""
    return state_name.startswith(PRIVILEGED_STATE_PREFIX)


ACTION = "action"
"""float32: (..., action_dim) per tick in datasets; (B, H, action_dim) chunks in training batches."""
TASK = "task"
"""The language instruction: a list of B strings in training batches."""
PREFIX_LEN = "prefix_len"
"""int64 (B,): committed prefix length d of each training chunk; the loss covers rows [d, H)."""
ACTION_MASK = "action_mask"
"""bool (B, H): True for real actions; False for padding after an episode's end."""
