"""`robotrl experiment NAME`: the end-to-end fine-tuning demo and the latency sweep."""
