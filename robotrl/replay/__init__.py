"""`robotrl replay`: recorded episodes replayed on the sim, re-simulated, streamed to a learner, viewed."""
