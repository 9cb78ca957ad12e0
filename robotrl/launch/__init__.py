"""`robotrl launch`: a learner and N actors as supervised processes on one host."""
