"""ZeroMQ links between the actor and the learner.

Transitions travel actor to learner with sequence numbers, acks, resend and a disk
spool (:mod:`.transitions`); weights travel learner to actors, latest wins, in
verified pieces (:mod:`.weights`). Both links carry heartbeats (:mod:`.heartbeat`)
and may run over CURVE (:mod:`.sockets`, :mod:`robotrl.wire.auth`).
"""
